"""Compiler logs → diagnostics in the user's files, rendered with the source line and a caret.

nvcc (cudafe++) writes ``path(line): error: msg`` then the source line and a caret line; gcc writes
``path:line:col: error: msg``; ptxas and the linker write neither. Thanks to the ``#line``
directives in the generated sources, ``path`` is the user's own file.
"""

from __future__ import annotations

import re
from pathlib import Path

from jitlab.errors import CompileError, Diagnostic

_NVCC = re.compile(r"^(?P<path>[^\s(][^(]*)\((?P<line>\d+)\): (?P<sev>error|warning|catastrophic error)(?: #\S+)?: (?P<msg>.*)$")
_GCC = re.compile(r"^(?P<path>[^\s:][^:]*):(?P<line>\d+):(?P<col>\d+): (?P<sev>error|warning|fatal error): (?P<msg>.*)$")
_OTHER = re.compile(r"(ptxas (?:fatal|error)\s*:.*|.*undefined reference to .*|.*\bld: cannot find .*|"
                    r"(?:\S*/)?(?:c\+\+|g\+\+|gcc|cc|clang\+\+|clang|x86_64-linux-gnu-g\+\+(?:-\d+)?): (?:fatal )?error: .*|"
                    r".*\berror: ld returned.*|nvcc fatal\s*:.*)")

MAX_SHOWN = 3


def parse_log(log: str, sources: dict[str, str] | None = None) -> list[Diagnostic]:
    """All errors and warnings in a build log, in order, without duplicates.

    Columns are display columns with tabs every 8 (gcc's convention); nvcc's caret, which counts a
    tab as one character, is converted using the source text when ``sources`` has the file.
    """
    out: list[Diagnostic] = []
    lines = log.splitlines()
    seen = set()
    for i, text in enumerate(lines):
        text = text.rstrip()
        m = _GCC.match(text)
        col, extra = None, ""
        if m:
            col = int(m.group("col"))
        else:
            m = _NVCC.match(text)
            if m:
                col, extra = _nvcc_details(lines, i)
                src = (sources or {}).get(m.group("path").strip())
                if col and src is not None:
                    col = _display_column(src, int(m.group("line")), col)
        if m:
            msg = m.group("msg").strip() + (f" ({extra})" if extra else "")
            d = Diagnostic(m.group("path").strip(), int(m.group("line")), col, m.group("sev"), msg)
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


def _nvcc_details(lines: list[str], i: int) -> tuple[int | None, str]:
    """cudafe++ may print detail lines ("operand types are: ..."), then the source line, then a caret.

    Returns the caret's 1-based column within the echoed line (tabs echoed as one space) and the
    detail lines joined.
    """
    details = []
    for j in range(i + 1, min(i + 8, len(lines))):
        line = lines[j]
        if line.strip() == "^" and j > i + 1:
            echoed = lines[j - 1]
            return line.index("^") - _indent_prefix(echoed) + 1, " ".join(details[:-1])
        if not line.strip() or _NVCC.match(line.rstrip()):
            break
        details.append(line.strip())
    return None, " ".join(details)


def _indent_prefix(echoed: str) -> int:
    return 2 if echoed.startswith("  ") else 0


def _display_column(text: str, line: int, char_col: int) -> int:
    """Character column (a tab counts 1) → display column (tabs every 8)."""
    rows = text.splitlines()
    if not 1 <= line <= len(rows):
        return char_col
    row = rows[line - 1]
    return len(row[: char_col - 1].expandtabs(8)) + 1


def render(d: Diagnostic, sources: dict[str, str]) -> str:
    """``path:line:col: error: msg`` with the source line and a caret under the column."""
    shown = short_path(d.path)
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
    src = src_lines[d.line - 1].expandtabs(8)
    gutter = f"{d.line:>5} | "
    out = [head, gutter + src]
    if d.column:
        out.append(" " * (len(gutter) - 2) + "| " + " " * (d.column - 1) + "^")
    return "\n".join(out)


def short_path(path: str) -> str:
    try:
        return str(Path(path).resolve().relative_to(Path.cwd()))
    except ValueError:
        return path


#: A compiler driver's or linker's own complaint: ``c++: error: ...``, ``nvcc fatal : ...``, ``ld: cannot find -lfoo``.
_DRIVER = re.compile(r"^\S*(?:: | )(?:fatal )?(?:error|fatal)\s*:\s*\S.*$|^.*\bld: .*$|^.*\bcannot find\b.*$", re.I)
#: What ninja and torch's build print around the compiler's own words (never the cause).
_NOISE = re.compile(r"^(\[\d+/\d+\]|FAILED:|ninja: |subcommand failed|Traceback|\s*$)")


def _cause(errors: list[Diagnostic], log: str) -> str:
    """The first line's reason: the compiler's first error (with how many there are), else the first line of the
    log a compiler driver or linker wrote as an error (a flag it rejected, a library it found no file for),
    else the log's last line."""
    if errors:
        n = len(errors)
        return f"{n} error{'s' if n != 1 else ''}: {errors[0].message}"[:300]
    lines = [ln.strip() for ln in log.splitlines() if not _NOISE.match(ln)]
    line = next((ln for ln in lines if _DRIVER.match(ln)), None) or next(
        (ln for ln in lines if re.search(r"\berror\b", ln, re.I) and not ln.startswith(("/", "c++ ", "g++ "))), None)
    line = line or (f"the build failed; the log ends: {lines[-1]}" if lines else "the build failed with an empty log")
    return line[:300]


def compile_error(what: str, log: str, sources: dict[str, str]) -> CompileError:
    """Build the one error type for a failed build, first errors first, full log attached.

    Args:
        what: One line naming the snippet and the compiler (``kernels/saxpy.cu (nvcc, sm_90)``).
        log: The whole compiler output.
        sources: The user's files by absolute path, to quote their lines.
    """
    diags = parse_log(log, sources)
    errors = [d for d in diags if d.severity != "warning"]
    warnings = [d for d in diags if d.severity == "warning"]
    n = len(errors)
    picked = errors[:MAX_SHOWN] + warnings[: max(0, MAX_SHOWN - len(errors))]
    shown = [render(d, sources) for d in picked]
    more = f"\n(and {n - MAX_SHOWN} more error{'s' if n - MAX_SHOWN > 1 else ''})" if n > MAX_SHOWN else ""
    return CompileError(
        summary=f"jitlab: {what} failed to compile: {_cause(errors, log)}",
        diagnostics=diags,
        log=log,
        excerpt="\n".join(shown) + more,
    )
