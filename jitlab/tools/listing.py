"""PTX and SASS listings: from a build's code to text with the user's source lines, and back to instructions.

For PTX, ``ptx_files`` and ``annotate_ptx`` put ``// file:line: source`` before each ``.loc`` that
moves to another line and ``ptx_entry`` keeps one kernel. For SASS, ``cubins`` finds a build's CUBINs
(an NVRTC build's files, or extracted from an nvcc object with cuobjdump), ``disassemble`` runs
nvdisasm with its line table, ``parse_nvdisasm`` reads the listing (padding after the last ``EXIT``
dropped) and ``render_sass`` interleaves the source lines, inlining included; ``cuobjdump_sass`` is
the raw listing. ``instructions``, ``count_instructions``, ``normalize_sass`` and ``sass_diff`` read
either kind of listing back as instructions. :mod:`jitlab.tools.inspect` builds and calls these.
"""

from __future__ import annotations

import difflib
import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from jitlab.errors import ArgumentError, ToolchainError
from jitlab.jit import toolchain
from jitlab.jit.resources import demangle
from jitlab.jit.sources import local_headers

# --- tools -----------------------------------------------------------------------------------------

def tool(name: str) -> str:
    """The path of a CUDA tool (``nvdisasm``, ``cuobjdump``), or a ToolchainError naming its pip package."""
    return toolchain.require_cuda_tool(name, f"`pip install nvidia-cuda-{name}`")


# --- PTX -------------------------------------------------------------------------------------------

_FILE = re.compile(r'^\s*\.file\s+(\d+)\s+"([^"]*)"', re.M)
_LOC = re.compile(r"^\s*\.loc\s+(\d+)\s+(\d+)\s+\d+")
_ENTRY = re.compile(r"^\s*(?:\.visible\s+|\.weak\s+)?\.entry\s+([\w$]+)")


def ptx_files(text: str) -> dict[int, str]:
    """The ``.file`` directives: file index → path."""
    return {int(n): path for n, path in _FILE.findall(text)}


def annotate_ptx(text: str, sources: dict[str, list[str]], files: dict[int, str]) -> str:
    """Put ``// file:line: source`` before each ``.loc`` that moves to another line of a file in
    ``sources`` (path → lines); ``files`` maps ``.loc``'s file index to a path."""
    out, last = [], None
    for line in text.splitlines():
        m = _LOC.match(line)
        if m:
            path = files.get(int(m.group(1)))
            lineno = int(m.group(2))
            lines = sources.get(path) if path else None
            if lines is not None and 1 <= lineno <= len(lines) and (path, lineno) != last:
                out.append(f"\t// {Path(path).name}:{lineno}: {lines[lineno - 1].strip()}")
                last = (path, lineno)
        out.append(line)
    return "\n".join(out) + "\n"


def ptx_entry(text: str, kernel: str) -> str:
    """The module header (``.version``, ``.target``, ``.address_size``) and one kernel's ``.entry``."""
    lines = text.splitlines()
    entries = [(i, m.group(1)) for i, line in enumerate(lines) if (m := _ENTRY.match(line))]
    hits = [e for e in entries if demangle(e[1]) == kernel] or [e for e in entries if kernel in e[1]]
    if not hits:
        known = ", ".join(demangle(n) for _, n in entries) or "none"
        raise ArgumentError(f"no kernel {kernel!r} in the PTX (kernels: {known})")
    header = [line for line in lines if re.match(r"^\.(version|target|address_size)\b", line)]
    out = header + [""]
    for start, _ in hits:
        end = start
        while end < len(lines) and lines[end].rstrip() != "}":
            end += 1
        out += lines[start:end + 1] + [""]
    return "\n".join(out)


# --- SASS ------------------------------------------------------------------------------------------

def cuobjdump_sass(cuobjdump: str, nvdisasm: str, artifact: Path, kernel: str | None) -> str:
    env = dict(os.environ, PATH=str(Path(nvdisasm).parent) + os.pathsep + os.environ.get("PATH", ""),
               NVDISASM_PATH=str(Path(nvdisasm).parent))  # cuobjdump runs nvdisasm
    proc = subprocess.run([cuobjdump, "-sass", str(artifact)], capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise ToolchainError(f"cuobjdump -sass {artifact} failed:\n{proc.stdout}{proc.stderr}")
    return _sass_function(proc.stdout, kernel) if kernel else proc.stdout


def cubins(b, arch: str, tmp: Path) -> list[Path]:
    """The build's CUBINs for ``arch``: an NVRTC build's files, or those inside an nvcc build's object."""
    own = b.manifest.cubins
    if own:
        if arch not in own:
            raise ToolchainError(f"{b.folder}: no CUBIN for {arch} (built: {', '.join(own)})")
        return [b.folder / own[arch]]
    if b.artifact.suffix == ".cubin":
        return [b.artifact]
    cuobjdump = tool("cuobjdump")
    proc = subprocess.run([cuobjdump, "-xelf", "all", str(b.artifact)], capture_output=True, text=True, cwd=tmp)
    if proc.returncode != 0:
        raise ToolchainError(f"cuobjdump -xelf all {b.artifact} failed:\n{proc.stdout}{proc.stderr}")
    found = sorted(tmp.glob(f"*.{arch}.cubin"))
    if not found:
        have = ", ".join(sorted(p.name for p in tmp.glob("*.cubin"))) or "none"
        raise ToolchainError(f"{b.artifact} holds no CUBIN for {arch} (CUBINs: {have})")
    return found


def disassemble(nvdisasm: str, cubin: Path) -> str:
    """Code sections only (``-c``), with the line table and its inlining (``-gi``)."""
    proc = subprocess.run([nvdisasm, "-c", "-gi", str(cubin)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise ToolchainError(f"nvdisasm -c -gi {cubin} failed:\n{proc.stdout}{proc.stderr}")
    return proc.stdout


def user_lines(plan) -> dict[str, list[str]]:
    """Real path → lines of every file of the snippet and every local header it includes."""
    files = {os.path.realpath(f.path): f.text.splitlines() for f in plan.files}
    for header in local_headers(plan.files, plan.include_dirs):
        try:
            files.setdefault(os.path.realpath(header), Path(header).read_text(errors="replace").splitlines())
        except OSError:
            pass
    return files


@dataclass
class SassFunction:
    """One function of an nvdisasm listing.

    Attributes:
        name: The mangled symbol.
        items: In order: ``("loc", [(file, line), ...])`` (innermost frame first, then the sites it is
            inlined at), ``("label", name)`` and ``("ins", address, predicate, text)``.
    """

    name: str
    items: list[tuple] = field(default_factory=list)


_SECTION = re.compile(r"^//-+\s+\.text\.(\S+)\s+-+")
_OTHER_SECTION = re.compile(r"^//-+\s")
_LINE_INFO = re.compile(r"^\s*//## File ")
_FRAME = re.compile(r'"([^"]*)", line (\d+)')
_INSTR = re.compile(r"^\s*/\*([0-9a-fA-F]{4,})\*/\s*(.*?)\s*$")
_PRED = re.compile(r"^(@!?U?P(?:\d+|T))\s+(.*)$")
_LABEL = re.compile(r"^(\.L_x_\d+):\s*$")
_LABEL_REF = re.compile(r"\.L_x_\d+")


def parse_nvdisasm(text: str) -> list[SassFunction]:
    """The functions of an ``nvdisasm -c -gi`` listing, padding after the last ``EXIT`` dropped."""
    functions: list[SassFunction] = []
    current: SassFunction | None = None
    frames: list[tuple[str, int]] = []  # the //## lines before the next instruction, flattened
    for line in text.splitlines():
        if m := _SECTION.match(line):
            current, frames = SassFunction(m.group(1)), []
            functions.append(current)
        elif _OTHER_SECTION.match(line):
            current, frames = None, []
        elif current is None:
            continue
        elif _LINE_INFO.match(line):
            for f in ((path, int(n)) for path, n in _FRAME.findall(line)):
                if not frames or frames[-1] != f:  # -gi prints the chain one frame per line, each with its caller
                    frames.append(f)
        elif m := _INSTR.match(line):
            if frames:
                current.items.append(("loc", frames))
                frames = []
            pred, body = _split_predicate(m.group(2))
            current.items.append(("ins", int(m.group(1), 16), pred, body))
        elif m := _LABEL.match(line.strip()):
            current.items.append(("label", m.group(1)))
    for f in functions:
        _drop_padding(f.items)
    return functions


def _split_predicate(text: str) -> tuple[str, str]:
    m = _PRED.match(text)
    return (m.group(1), m.group(2)) if m else ("", text)


def _drop_padding(items: list[tuple]) -> None:
    """Remove what follows the last real instruction: ``NOP``s, the ``BRA`` to itself, their labels."""
    labels: dict[str, int] = {}
    pending: list[str] = []
    for item in items:  # a label's address is the next instruction's
        if item[0] == "label":
            pending.append(item[1])
        elif item[0] == "ins":
            labels.update((name, item[1]) for name in pending)
            pending = []
    while items and (items[-1][0] in ("label", "loc") or _is_padding(*items[-1][1:], labels=labels)):
        items.pop()


def _is_padding(address: int, pred: str, body: str, labels: dict[str, int]) -> bool:
    """``NOP``, or an unconditional ``BRA`` to its own address (``BRA 0x130`` / ``BRA `(.L_x_0)``)."""
    op = body.split(None, 1)[0].rstrip(";") if body.split() else ""
    if op == "NOP":
        return True
    if op != "BRA" or pred:
        return False
    m = re.search(r"`\((\.L_x_\d+)\)|\b0x([0-9a-fA-F]+)\b", body)
    if not m:
        return False
    target = labels.get(m.group(1)) if m.group(1) else int(m.group(2), 16)
    return target == address


def render_sass(functions: list[SassFunction], sources: dict[str, list[str]]) -> str:
    """The listing: per function a ``Function :`` header, then ``// file:line: text`` before the
    instructions of each line of ``sources`` (real path → lines), labels only where a branch goes."""
    out: list[str] = []
    for f in functions:
        name = demangle(f.name)
        out.append(f"\tFunction : {f.name}" + (f" ({name})" if name != f.name else ""))
        used = {ref for item in f.items if item[0] == "ins" for ref in _LABEL_REF.findall(item[3])}
        last = None
        for item in f.items:
            if item[0] == "loc":
                where = _where(item[1], sources)
                if where != last:
                    out.append(f"\t// {where}")
                    last = where
            elif item[0] == "label" and item[1] in used:
                out.append(f"\t{item[1]}:")
            elif item[0] == "ins":
                out.append(f"\t    /*{item[1]:04x}*/ {item[2]:>6} {item[3]}")
        out.append("")
    return "\n".join(out)


def _where(frames: list[tuple[str, int]], sources: dict[str, list[str]]) -> str:
    """``file:line: text`` of the innermost frame in the user's files (toolkit headers skipped), with
    the user's call sites it is inlined at; the innermost frame's ``file:line`` if none is the user's."""
    mine = [(os.path.realpath(p), n) for p, n in frames if os.path.realpath(p) in sources]
    if not mine:
        path, n = frames[0]
        return f"{Path(path).name}:{n}"
    (path, n), callers = mine[0], mine[1:]
    lines = sources[path]
    text = lines[n - 1].strip() if 1 <= n <= len(lines) else ""
    where = f"{Path(path).name}:{n}: {text}"
    if callers:
        where += "  (inlined at " + ", ".join(f"{Path(p).name}:{c}" for p, c in callers) + ")"
    return where


_FUNCTION = re.compile(r"^\s*Function\s*:\s*(\S+)")


def pick(items: list, kernel: str, name_of) -> list:
    """The items whose symbol demangles to ``kernel`` (else contains it), or an ArgumentError naming the kernels."""
    hits = [s for s in items if demangle(name_of(s)) == kernel] or [s for s in items if kernel in name_of(s)]
    if not hits:
        known = ", ".join(demangle(name_of(s)) for s in items) or "none"
        raise ArgumentError(f"no kernel {kernel!r} in the SASS (kernels: {known})")
    return hits


def _sass_function(text: str, kernel: str) -> str:
    """One kernel's ``Function : ...`` section of a cuobjdump listing."""
    sections: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        m = _FUNCTION.match(line)
        if m:
            sections.append((m.group(1), [line]))
        elif sections:
            if line.startswith("Fatbin") or re.match(r"^\s*\.{10,}", line):
                sections.append(("", []))  # end of the last function
            else:
                sections[-1][1].append(line)
    hits = pick([s for s in sections if s[0]], kernel, lambda s: s[0])
    return "\n".join(line for _, body in hits for line in body).rstrip() + "\n"


# --- reading listings: instructions, counts, diffs -------------------------------------------------

_BRANCH = re.compile(r"^(@!?U?P\w+\s+)?(BRA|BRX|BSSY|CALL|JMP|JMX|SSY|PBK|PCNT|RET)\b")


def _functions_of(text: str) -> list[tuple[str, list[tuple[int, str, str]]]]:
    """A listing (``inspect.sass``'s or cuobjdump's) as ``(function, [(address, predicate, text), ...])``,
    encodings and padding dropped; instructions before any ``Function :`` go under ``""``."""
    out: list[tuple[str, list]] = [("", [])]
    for line in text.splitlines():
        if m := _FUNCTION.match(line):
            out.append((m.group(1), []))
        elif m := _INSTR.match(line):
            body = " ".join(re.sub(r"/\*\s*0x[0-9a-fA-F]+\s*\*/", "", m.group(2)).split())  # encodings
            if body:
                out[-1][1].append((int(m.group(1), 16), *_split_predicate(body)))
    for _, ins in out:
        while ins and _is_padding(*ins[-1], labels={}):
            ins.pop()
    return [f for f in out if f[0] or f[1]]


def instructions(text: str) -> list[str]:
    """The instructions of a listing in order (``@P0 EXIT ;``), whatever else the listing holds:
    source lines, addresses, encodings, labels and the padding after ``EXIT`` are left out."""
    return [f"{pred} {body}".strip() for _, ins in _functions_of(text) for _, pred, body in ins]


def count_instructions(text: str, opcode: str) -> int:
    """How many instructions of a listing have this opcode and at least these modifiers, in any order.

    ``count_instructions(s, "LDG.E.128")`` counts ``LDG.E.128``, ``LDG.E.EF.128`` and
    ``LDG.E.128.CONSTANT``; ``"LDG.128"`` any 128-bit global load; ``"FFMA"`` every FFMA.
    """
    want, *mods = opcode.upper().split(".")
    n = 0
    for ins in instructions(text):
        parts = ins.split()[1 if ins.startswith("@") else 0].rstrip(";").split(".")
        n += parts[0] == want and all(m in parts[1:] for m in mods)
    return n


def normalize_sass(text: str) -> list[str]:
    """``Function : <name>`` lines and the instruction text only: source lines, addresses, encodings,
    labels, branch targets (as ``<addr>``), the padding after ``EXIT`` and the rest removed."""
    out = []
    for name, ins in _functions_of(text):
        if name:
            out.append(f"Function : {name}")
        for _, pred, body in ins:
            line = f"{pred} {body}".strip()
            if _BRANCH.match(line):
                line = re.sub(r"`\(\.L_x_\d+\)|0x[0-9a-fA-F]+", "<addr>", line)
            out.append(line)
    return out


def sass_diff(old_sass: str, new_sass: str, old_name: str = "old", new_name: str = "new") -> str:
    """A unified diff of two SASS listings that shows only instruction changes (``""`` when equal).

    Either kind of listing works (``inspect.sass``'s, with source lines, or ``raw=True``'s); source lines,
    addresses, encodings and padding never show as changes.
    """
    return "".join(difflib.unified_diff([line + "\n" for line in normalize_sass(old_sass)],
                                        [line + "\n" for line in normalize_sass(new_sass)],
                                        old_name, new_name))
