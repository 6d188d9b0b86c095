"""What jitlab prints in a notebook cell, folded at words.

JupyterLab shows a cell's text output with ``word-break: break-all``: a 300-character message wraps in the
middle of words at the window's edge. Lines jitlab prints there are folded at spaces to :data:`WIDTH` columns
first. Only prose is folded: an indented line (a compiler's source excerpt with its caret, a table's row, a
traceback) keeps its layout, and a word longer than the width (a path) stays whole.
"""

from __future__ import annotations

import textwrap

#: Columns a folded line holds at most: a JupyterLab output at its default width shows ~100.
WIDTH = 100
#: What a folded line's continuation starts with.
INDENT = "  "


def fold(text: str, width: int = WIDTH) -> str:
    """``text`` with each unindented line longer than ``width`` broken at spaces, continuations indented."""
    out = []
    for line in text.split("\n"):
        if len(line) <= width or line[:1].isspace():
            out.append(line)
        else:
            out.extend(textwrap.wrap(line, width, subsequent_indent=INDENT, break_long_words=False,
                                     break_on_hyphens=False))
    return "\n".join(out)


def say(*parts: object) -> None:
    """``print`` for a notebook cell: the parts joined by spaces, folded (:func:`fold`)."""
    print(fold(" ".join(map(str, parts))))
