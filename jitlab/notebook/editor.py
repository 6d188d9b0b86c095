"""A code editor widget for notebooks: CodeMirror 6 in an `anywidget`, with C++/CUDA highlighting.

The front end is ``static/editor.js``, one self-contained ES module (CodeMirror and its themes
inlined, nothing fetched at run time) built from ``js/editor/`` by ``scripts/build-editor``.

    ed = Editor(value=open("kernels/saxpy.cu").read(), language="cuda")
    ed.on_save(lambda ed: print("save", len(ed.value)))     # Ctrl/Cmd-S in the editor
    ed.on_build(lambda ed: print("build"))                   # Shift-Enter in the editor
    ed.error_lines = [12]                                    # mark line 12 and scroll to it
    ed                                                       # show it
"""

from __future__ import annotations

import operator
from pathlib import Path

import anywidget
import traitlets
from ipywidgets import CallbackDispatcher

BUNDLE = Path(__file__).with_name("static") / "editor.js"
EVENTS = ("save", "build")


class Editor(anywidget.AnyWidget):
    """CodeMirror 6 editor: line numbers, bracket matching, undo history, Tab → 4 spaces.

    Ctrl/Cmd-S calls the :meth:`on_save` callbacks and Shift-Enter the :meth:`on_build` ones (neither
    reaches the browser or JupyterLab: no save dialog, the cell does not run). The browser sends the
    text to ``value`` about 150 ms after typing stops, and with every save/build event, so a
    callback reads the text the user sees. Setting ``value`` from Python replaces the text, keeping
    the cursor and scroll position, unless the user is typing at that moment (their edit wins).

    Attributes:
        value: The code (synced both ways).
        language: ``"cuda"`` (C++ plus CUDA's qualifiers and built-ins highlighted) or ``"cpp"``.
        error_lines: 1-based line numbers to mark (red background and a gutter marker); the first is
            scrolled into view. Marks move with the user's edits until set again; ``[]`` clears them.
            Lines past the end of the text are ignored.
        read_only: Whether the text can be edited.
        height: CSS height of the editor (``"24em"``); ``""`` grows with the text.

    DOM class: ``jitlab-code-editor`` (and any added with ``add_class``).
    """

    _esm = BUNDLE
    value = traitlets.Unicode("").tag(sync=True)
    language = traitlets.Enum(("cuda", "cpp"), default_value="cuda").tag(sync=True)
    error_lines = traitlets.List().tag(sync=True)  # checked by _valid_error_lines
    read_only = traitlets.Bool(False).tag(sync=True)
    height = traitlets.Unicode("24em").tag(sync=True)

    def __init__(self, value: str = "", **kwargs):
        super().__init__(value=value, **kwargs)
        self._handlers = {event: CallbackDispatcher() for event in EVENTS}
        self.on_msg(self._handle_event)

    @traitlets.validate("error_lines")
    def _valid_error_lines(self, proposal) -> list[int]:
        """Line numbers as a list of ints >= 1, duplicates dropped (order kept: the first is shown)."""
        lines = []
        for n in proposal["value"]:
            try:
                if isinstance(n, bool):
                    raise TypeError
                n = operator.index(n)
            except TypeError:
                raise traitlets.TraitError(f"error_lines must be 1-based line numbers (ints), got {n!r} "
                                           f"in {proposal['value']!r}") from None
            if n < 1:
                raise traitlets.TraitError(f"error_lines must be 1-based line numbers (>= 1), got {n} "
                                           f"in {proposal['value']!r}")
            if n not in lines:
                lines.append(n)
        return lines

    def on_save(self, callback, remove: bool = False) -> None:
        """Call ``callback(editor)`` when the user presses Ctrl/Cmd-S in the editor.

        Args:
            callback: Called with this editor; ``editor.value`` is the text the user saved.
            remove: Unregister ``callback`` instead.
        """
        self._handlers["save"].register_callback(callback, remove=remove)

    def on_build(self, callback, remove: bool = False) -> None:
        """Call ``callback(editor)`` when the user presses Shift-Enter in the editor.

        Args:
            callback: Called with this editor; ``editor.value`` is the current text.
            remove: Unregister ``callback`` instead.
        """
        self._handlers["build"].register_callback(callback, remove=remove)

    def _handle_event(self, _widget, content, _buffers) -> None:
        """A custom message from the browser: ``{"event": "save" | "build", "value": text}``; others are ignored.

        The text comes with the event: ipywidgets may hold the browser's last ``value`` update back while an
        earlier one is unanswered, and send the event first.
        """
        event = content.get("event") if isinstance(content, dict) else None
        if event in self._handlers:
            if isinstance(content.get("value"), str):
                self.value = content["value"]
            self._handlers[event](self)
