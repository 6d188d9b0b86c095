"""Compiler logs → diagnostics in the user's files, rendered with the source line and a caret.

nvcc (cudafe++) writes ``path(line): error: msg`` then the source line and a caret line; gcc writes
``path:line:col: error: msg``; ptxas and the linker write neither. Thanks to the ``#line``
directives in the generated sources, ``path`` is the user's own file.
"""

from __future__ import annotations

import re
from pathlib import Path

from .errors import CompileError, Diagnostic

_NVCC = re.compile(r"^(?P<path>[^\s(][^(]*)\((?P<line>\d+)\): (?P<sev>error|warning|catastrophic error)(?: #\S+)?: (?P<msg>.*)$")
_GCC = re.compile(r"^(?P<path>[^\s:][^:]*):(?P<line>\d+):(?P<col>\d+): (?P<sev>error|warning|fatal error): (?P<msg>.*)$")
_OTHER = re.compile(r"(ptxas (?:fatal|error)\s*:.*|.*undefined reference to .*|.*\berror: ld returned.*|nvcc fatal\s*:.*)")

MAX_SHOWN = 3


def parse_log(log: str) -> list[Diagnostic]:
    """All errors and warnings in a build log, in order, without duplicates."""
    out: list[Diagnostic] = []
    lines = log.splitlines()
    seen = set()
    for i, text in enumerate(lines):
        text = text.rstrip()
        m = _GCC.match(text)
        col = None
        if m:
            col = int(m.group("col"))
        else:
            m = _NVCC.match(text)
            if m:
                col = _nvcc_caret_column(lines, i)
        if m:
            d = Diagnostic(m.group("path").strip(), int(m.group("line")), col, m.group("sev"), m.group("msg").strip())
        else:
            o = _OTHER.search(text)
            if not o:
                continue
            d = Diagnostic("", 0, None, "error", o.group(1).strip())
        k = (d.path, d.line, d.severity, d.message)
        if k not in seen:
            seen.add(k)
            out.append(d)
    return out


def _nvcc_caret_column(lines: list[str], i: int) -> int | None:
    """cudafe++ prints the source line then a caret line under it; the caret's offset is the column."""
    if i + 2 < len(lines) and lines[i + 2].strip() == "^":
        src, caret = lines[i + 1], lines[i + 2]
        # cudafe++ indents the echoed source line by a fixed prefix; strip the common prefix.
        return caret.index("^") - _indent_prefix(src) + 1
    return None


def _indent_prefix(echoed: str) -> int:
    return 2 if echoed.startswith("  ") else 0


def render(d: Diagnostic, sources: dict[str, str]) -> str:
    """``path:line:col: error: msg`` with the source line and a caret under the column."""
    shown = _short(d.path)
    head = f"{shown}:{d.line}{':' + str(d.column) if d.column else ''}: {d.severity}: {d.message}" if d.path else d.message
    text = sources.get(d.path)
    if text is None and d.path and Path(d.path).is_file():
        try:
            text = Path(d.path).read_text(encoding="utf-8", errors="replace")
        except OSError:
            text = None
    if not text or not d.line:
        return head
    src_lines = text.splitlines()
    if d.line > len(src_lines):
        return head
    src = src_lines[d.line - 1].expandtabs(4)
    gutter = f"{d.line:>5} | "
    out = [head, gutter + src]
    if d.column:
        out.append(" " * (len(gutter) - 2) + "| " + " " * (d.column - 1) + "^")
    return "\n".join(out)


def _short(path: str) -> str:
    try:
        return str(Path(path).resolve().relative_to(Path.cwd()))
    except ValueError:
        return path


def compile_error(what: str, log: str, sources: dict[str, str]) -> CompileError:
    """Build the one error type for a failed build, first errors first, full log attached.

    Args:
        what: One line naming the snippet and the compiler (``kernels/saxpy.cu (nvcc, sm_90)``).
        log: The whole compiler output.
        sources: The user's files by absolute path, to quote their lines.
    """
    diags = parse_log(log)
    errors = [d for d in diags if d.severity != "warning"] or diags
    n = len([d for d in diags if d.severity != "warning"])
    shown = [render(d, sources) for d in errors[:MAX_SHOWN]]
    more = f"\n(and {n - MAX_SHOWN} more error{'s' if n - MAX_SHOWN > 1 else ''})" if n > MAX_SHOWN else ""
    noun = f"{n} error{'s' if n != 1 else ''}" if n else "the build failed"
    return CompileError(
        summary=f"jitlab: {what} failed to compile: {noun}",
        diagnostics=diags,
        log=log,
        excerpt="\n".join(shown) + more,
    )
