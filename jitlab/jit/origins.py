"""Where a line of a written source came from: a ``load_inline`` string, and the cell or script line holding it.

:class:`Origin` is one stretch of a file jitlab wrote from a user's string; ``relocate`` moves a
compile error's locations from the written file back to ``load_inline 'name' cuda_sources[0], line 7``,
adding the caller's line (``Cell In[3], line 12``) when the string is a literal there (IPython keeps
each cell's source in ``linecache``, as Python keeps a script's).
"""

from __future__ import annotations

import linecache
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from jitlab.errors import CompileError, Diagnostic
from jitlab.jit import diagnostics


@dataclass
class Origin:
    """One stretch of a written file and where its text came from.

    Attributes:
        label: What the user wrote it as: ``load_inline 'square' cuda_sources[0]``.
        first: The file's line that is the text's line 1.
        text: The text itself.
        caller: ``(where, line)``: the caller's cell or file, and its line holding the text's line 1, when
            the text is a literal there (``("Cell In[3]", 12)``); ``None`` otherwise.
    """

    label: str
    first: int
    text: str
    caller: tuple[str, int] | None = None

    @property
    def last(self) -> int:
        return self.first + self.text.count("\n")


def caller_file() -> str | None:
    """The file (or IPython cell) of the first frame outside jitlab, where a source literal may be."""
    f = sys._getframe(1)
    while f is not None and f.f_globals.get("__name__", "").startswith("jitlab"):
        f = f.f_back
    return f.f_code.co_filename if f is not None else None


def find_in_caller(text: str, filename: str | None) -> tuple[str, int] | None:
    """Where ``text`` is written, verbatim and once, in the caller's source: ``(cell or file, line)``."""
    if not filename or not text.strip():
        return None
    source = "".join(linecache.getlines(filename))
    at = source.find(text)
    if at < 0 or source.find(text, at + 1) >= 0:
        return None
    return _display_name(filename), source.count("\n", 0, at) + 1


def _display_name(filename: str) -> str:
    """``Cell In[3]`` for an IPython cell (as IPython's tracebacks say), else the file's short path."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    named = getattr(getattr(shell, "compile", None), "format_code_name", lambda _: None)(filename)
    return " ".join(named) if named else diagnostics.short_path(filename)


def relocate(err: CompileError, name: str, origins: dict[str, list[Origin]]) -> CompileError:
    """The error with each location in a written file moved to the source string (and cell line) it came from."""
    moved = [_moved(d, origins) for d in err.diagnostics]
    errors = [m for m in moved if m[0].severity != "warning"]
    warns = [m for m in moved if m[0].severity == "warning"]
    picked = errors[: diagnostics.MAX_SHOWN] + warns[: max(0, diagnostics.MAX_SHOWN - len(errors))]
    more = len(errors) - diagnostics.MAX_SHOWN
    excerpt = "\n".join(shown for _, shown in picked) + (f"\n(and {more} more error{'s' if more > 1 else ''})"
                                                       if more > 0 else "")
    summary = err.summary
    for f in origins:
        summary = summary.replace(diagnostics.short_path(f), "\0")
    summary = re.sub(r"\x00(, \x00)*", f"load_inline {name!r}", summary)
    return CompileError(summary, [d for d, _ in moved], err.log, excerpt)


def _moved(d: Diagnostic, origins_by_file: dict[str, list[Origin]]) -> tuple[Diagnostic, str]:
    """One diagnostic at its source string's line, and its rendering with that line and a caret."""
    origins = origins_by_file.get(str(Path(d.path).resolve()) if d.path else "", [])
    o = next((o for o in origins if o.first <= d.line <= o.last), None)
    if o is None:
        return d, diagnostics.render(d, {})
    line = d.line - o.first + 1
    where = f"{o.label}, line {line}"
    if o.caller:
        where = f"{o.caller[0]}, line {o.caller[1] + line - 1} ({where})"
    msg = d.message
    if "bindings" in o.label and ("not declared" in msg or "undeclared" in msg or "undefined" in msg):
        msg += " (each name in functions= must be declared in cpp_sources)"
    out = [f"{where}: {d.severity}: {msg}"]
    rows = o.text.splitlines()
    if 1 <= line <= len(rows):
        gutter = f"{line:>5} | "
        out.append(gutter + rows[line - 1].expandtabs(8))
        if d.column:
            out.append(" " * (len(gutter) - 2) + "| " + " " * (d.column - 1) + "^")
    return Diagnostic(o.label, line, d.column, d.severity, msg), "\n".join(out)
