"""What a built kernel uses: resources, theoretical occupancy, PTX and SASS. No GPU needed.

``resources`` is the compile-only build's ptxas report; ``occupancy`` turns one kernel's report and a
launch configuration into active blocks and warps per SM with the resource that limits them; ``ptx``
and ``sass`` show the code made from exactly the unit jitlab builds, with the user's source lines
between the instructions (the PTX's ``.loc``, the CUBIN's line table); ``sass_diff`` compares two
SASS listings instruction by instruction and ``count_instructions`` counts an opcode with modifiers.

(The module is ``jitlab.inspect``; it does not shadow the standard library's ``inspect``, which
absolute imports always find first.)
"""

from __future__ import annotations

import difflib
import os
import re
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from . import builder, cache, diagnostics, toolchain
from .errors import ArgumentError, ToolchainError

# Per-arch limits for occupancy, from NVIDIA's CUDA Programming Guide ("Technical Specifications per
# Compute Capability") and the CUDA occupancy calculator (cuda_occupancy.h: register allocation
# granularity 256 registers per warp, 4 register sub-partitions per SM, shared memory allocation
# granularity 256 B on 7.x and 128 B on 8.x/9.x, 1 KB of shared memory reserved per block by the
# driver on 8.x/9.x). Shared memory per SM is the largest carveout; per block, the opt-in maximum.
# The same on every arch below.
_COMMON = dict(max_threads_per_block=1024, regs_per_sm=65536, regs_per_block=65536,
               max_regs_per_thread=255, reg_alloc_unit=256, reg_sub_partitions=4)
ARCH_LIMITS: dict[str, dict[str, int]] = {
    # Turing (T4, RTX 20xx)
    "sm_75": dict(max_threads_per_sm=1024, max_warps_per_sm=32, max_blocks_per_sm=16,
                  **_COMMON, smem_per_sm=65536, smem_per_block=65536, smem_reserved_per_block=0, smem_alloc_unit=256),
    # Ampere datacenter (A100)
    "sm_80": dict(max_threads_per_sm=2048, max_warps_per_sm=64, max_blocks_per_sm=32,
                  **_COMMON, smem_per_sm=167936, smem_per_block=166912, smem_reserved_per_block=1024, smem_alloc_unit=128),
    # Ampere consumer (RTX 30xx, A10, A40)
    "sm_86": dict(max_threads_per_sm=1536, max_warps_per_sm=48, max_blocks_per_sm=16,
                  **_COMMON, smem_per_sm=102400, smem_per_block=101376, smem_reserved_per_block=1024, smem_alloc_unit=128),
    # Ada (RTX 40xx, L4, L40)
    "sm_89": dict(max_threads_per_sm=1536, max_warps_per_sm=48, max_blocks_per_sm=24,
                  **_COMMON, smem_per_sm=102400, smem_per_block=101376, smem_reserved_per_block=1024, smem_alloc_unit=128),
    # Hopper (H100, H200)
    "sm_90": dict(max_threads_per_sm=2048, max_warps_per_sm=64, max_blocks_per_sm=32,
                  **_COMMON, smem_per_sm=233472, smem_per_block=232448, smem_reserved_per_block=1024, smem_alloc_unit=128),
}

WARP = 32
#: Order in which equally limiting resources are named (at full occupancy: "threads/warps").
LIMITERS = ("threads/warps", "blocks", "registers", "shared memory")


def arch_limits(arch: str) -> dict[str, int]:
    """The limits table row for ``arch`` (``sm_90a`` and ``compute_90`` use ``sm_90``'s)."""
    a = toolchain.normalize_arch(arch)
    key = "sm_" + re.sub(r"[af]$", "", a.split("_", 1)[1])
    if key not in ARCH_LIMITS:
        raise ArgumentError(f"no occupancy limits for {arch}: known archs are {', '.join(ARCH_LIMITS)}")
    return ARCH_LIMITS[key]


def _round_up(x: int, unit: int) -> int:
    return -(-x // unit) * unit


def occupancy(resources: dict, block_size: int, dynamic_smem: int = 0, arch: str = "sm_90") -> dict:
    """Theoretical occupancy of one kernel, as NVIDIA's occupancy calculator computes it.

    Args:
        resources: One kernel's usage for one arch, as in ``build.resources[kernel][arch]``
            (``registers`` per thread and static ``shared`` bytes per block are used).
        block_size: Threads per block.
        dynamic_smem: Dynamic shared memory per block in bytes (the launch's ``shared_mem=``).
        arch: The arch whose limits apply.

    Returns:
        ``{"arch", "block_size", "blocks_per_sm", "warps_per_sm", "max_warps_per_sm", "occupancy",
        "limiter", "blocks_by"}``: ``occupancy`` is active warps over the SM's maximum (0..1),
        ``limiter`` the resource that caps the blocks (one of ``LIMITERS``), ``blocks_by`` the blocks
        per SM each resource alone allows. 0 blocks means the launch does not fit at all.
    """
    lim = arch_limits(arch)
    if block_size < 1:
        raise ArgumentError(f"block size must be at least 1, not {block_size}")
    regs = int(resources.get("registers", 0))
    warps_per_block = -(-block_size // WARP)
    by: dict[str, int] = {}

    # threads/warps
    if block_size > lim["max_threads_per_block"]:
        by["threads/warps"] = 0
    else:
        by["threads/warps"] = min(lim["max_warps_per_sm"] // warps_per_block, lim["max_threads_per_sm"] // block_size)
    by["blocks"] = lim["max_blocks_per_sm"]

    # registers: allocated per warp, in units of reg_alloc_unit, within each of the SM's sub-partitions
    regs_per_warp = _round_up(regs * WARP, lim["reg_alloc_unit"])
    parts = lim["reg_sub_partitions"]
    if regs > lim["max_regs_per_thread"] or regs_per_warp * _round_up(warps_per_block, parts) > lim["regs_per_block"]:
        by["registers"] = 0
    elif regs_per_warp == 0:
        by["registers"] = lim["max_blocks_per_sm"]
    else:
        warps = (lim["regs_per_sm"] // parts // regs_per_warp) * parts
        by["registers"] = warps // warps_per_block

    # shared memory: static + dynamic + the driver's reserve, rounded up to the allocation unit
    smem = _round_up(int(resources.get("shared", 0)) + dynamic_smem + lim["smem_reserved_per_block"],
                     lim["smem_alloc_unit"])
    if smem > lim["smem_per_block"] + lim["smem_reserved_per_block"]:
        by["shared memory"] = 0
    elif smem == 0:
        by["shared memory"] = lim["max_blocks_per_sm"]
    else:
        by["shared memory"] = lim["smem_per_sm"] // smem

    blocks = min(by.values())
    limiter = next(name for name in LIMITERS if by[name] == blocks)
    warps = blocks * warps_per_block
    return {"arch": arch, "block_size": block_size, "blocks_per_sm": blocks, "warps_per_sm": warps,
            "max_warps_per_sm": lim["max_warps_per_sm"], "occupancy": warps / lim["max_warps_per_sm"],
            "limiter": limiter, "blocks_by": by}


def resources(path, arch="sm_90", **options) -> dict:
    """Per-kernel, per-arch resource usage of a compile-only build (registers, spills, shared, local,
    constant): ``build.resources``, built or found in the cache. ``arch`` may be a list."""
    import jitlab

    return jitlab.build(path, arch=arch, compile_only=True, **options).resources


# --- tools -----------------------------------------------------------------------------------------

def _tool(name: str) -> str:
    return toolchain.require_cuda_tool(name, f"`pip install nvidia-cuda-{name}`")


# --- PTX -------------------------------------------------------------------------------------------

def ptx(path, kernel: str | None = None, arch: str = "sm_90", mode: str = "auto", defines=None,
        cflags=None, cuda_cflags=None, ldflags=None) -> str:
    """The PTX nvcc makes (``-ptx -lineinfo``) from exactly the CUDA unit jitlab builds for the snippet.

    Args:
        path: The snippet (file, folder or list), as for :func:`jitlab.build`.
        kernel: Only this kernel's ``.entry`` (matched by its unmangled name, else a substring of the
            mangled one); default: the whole module.
        arch: One arch.

    Returns:
        The PTX, with ``// file:line: source`` comments before each ``.loc`` that moves to another
        line of the user's files.

    Raises:
        ArgumentError: No kernel of that name. CompileError, ToolchainError, SnippetError: as a build.
    """
    import jitlab

    opts = jitlab._options(mode, [arch], defines, cflags, cuda_cflags, ldflags, True)  # builds carry -lineinfo
    plan, archs, parts = builder.prepare(path, opts)
    if not plan.cuda:
        raise ArgumentError(f"{path}: PTX is made from CUDA snippets (.cu); this one has none")
    toolchain.check(True, compile_only=True)
    name = cache.module_name(plan.stem, cache.build_key(parts))
    with tempfile.TemporaryDirectory(prefix="jitlab-ptx-") as tmp:
        src, out = Path(tmp) / "cuda.cu", Path(tmp) / "cuda.ptx"
        src.write_text("\n".join(plan.device_sources))
        cmd = builder.nvcc_command(plan, name, archs, opts, ["-ptx", str(src), "-o", str(out)])
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            log = " ".join(cmd) + "\n" + proc.stdout + proc.stderr
            raise diagnostics.compile_error(f"{path} (nvcc -ptx, {archs[0]})", log, builder._sources_by_path(plan))
        text = out.read_text()
    files = ptx_files(text)
    if kernel:
        text = _ptx_entry(text, kernel)
    return annotate_ptx(text, {str(f.path): f.text.splitlines() for f in plan.files}, files)


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


def _ptx_entry(text: str, kernel: str) -> str:
    """The module header (``.version``, ``.target``, ``.address_size``) and one kernel's ``.entry``."""
    lines = text.splitlines()
    entries = [(i, m.group(1)) for i, line in enumerate(lines) if (m := _ENTRY.match(line))]
    hits = [e for e in entries if builder._demangle(e[1]) == kernel] or [e for e in entries if kernel in e[1]]
    if not hits:
        known = ", ".join(builder._demangle(n) for _, n in entries) or "none"
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

def sass(path, kernel: str | None = None, arch: str = "sm_90", *, raw: bool = False, **options) -> str:
    """The SASS of a compile-only ``-lineinfo`` build, each run of instructions after the source line it came from.

    The CUBIN of ``arch`` (an NVRTC build's own file, or extracted from an nvcc build's object with
    ``cuobjdump -xelf``) is disassembled by ``nvdisasm --print-line-info-inline``; the listing names each
    kernel (``Function : <mangled> (<name>)``) and puts ``// file:line: text`` from your files before
    the instructions of that line (``(inlined at file:line)`` for a ``__device__`` function's body).
    Encodings, unused labels and the ``BRA``/``NOP`` padding after the last ``EXIT`` are left out.

    Args:
        path: The snippet, as for :func:`jitlab.build` (``options`` too: ``defines=``, ``cuda_cflags=``, ...).
        kernel: Only this kernel's function (unmangled name, else a substring of the mangled one).
        arch: One ``sm_XY`` arch.
        raw: ``cuobjdump -sass``'s listing as it is instead: encodings and padding, no source lines.

    Returns:
        The listing; :func:`sass_diff`, :func:`instructions` and :func:`count_instructions` read it
        (and the raw one) without the source lines.

    Raises:
        ToolchainError: nvdisasm, or cuobjdump (nvcc builds and ``raw``), is missing, naming the pip package.
        ArgumentError: No kernel of that name.
    """
    import jitlab

    nvdisasm = _tool("nvdisasm")
    cuobjdump = _tool("cuobjdump") if raw else None
    b = jitlab.build(path, arch=[arch], compile_only=True, **options)  # builds carry -lineinfo
    if raw:
        return _cuobjdump_sass(cuobjdump, nvdisasm, b.artifact, kernel)
    with tempfile.TemporaryDirectory(prefix="jitlab-sass-") as tmp:
        listings = [_nvdisasm(nvdisasm, cubin) for cubin in _cubins(b, b.archs[0], Path(tmp))]
    functions = [f for listing in listings for f in parse_nvdisasm(listing)]
    if kernel:
        functions = _pick(functions, kernel, lambda f: f.name)
    return render_sass(functions, _user_lines(b.plan))


def _cuobjdump_sass(cuobjdump: str, nvdisasm: str, artifact: Path, kernel: str | None) -> str:
    env = dict(os.environ, PATH=str(Path(nvdisasm).parent) + os.pathsep + os.environ.get("PATH", ""),
               NVDISASM_PATH=str(Path(nvdisasm).parent))  # cuobjdump runs nvdisasm
    proc = subprocess.run([cuobjdump, "-sass", str(artifact)], capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise ToolchainError(f"cuobjdump -sass {artifact} failed:\n{proc.stdout}{proc.stderr}")
    return _sass_function(proc.stdout, kernel) if kernel else proc.stdout


def _cubins(b, arch: str, tmp: Path) -> list[Path]:
    """The build's CUBINs for ``arch``: an NVRTC build's files, or those inside an nvcc build's object."""
    own = b.manifest.get("cubins")
    if own:
        if arch not in own:
            raise ToolchainError(f"{b.folder}: no CUBIN for {arch} (built: {', '.join(own)})")
        return [b.folder / own[arch]]
    if b.artifact.suffix == ".cubin":
        return [b.artifact]
    cuobjdump = _tool("cuobjdump")
    proc = subprocess.run([cuobjdump, "-xelf", "all", str(b.artifact)], capture_output=True, text=True, cwd=tmp)
    if proc.returncode != 0:
        raise ToolchainError(f"cuobjdump -xelf all {b.artifact} failed:\n{proc.stdout}{proc.stderr}")
    found = sorted(tmp.glob(f"*.{arch}.cubin"))
    if not found:
        have = ", ".join(sorted(p.name for p in tmp.glob("*.cubin"))) or "none"
        raise ToolchainError(f"{b.artifact} holds no CUBIN for {arch} (CUBINs: {have})")
    return found


def _nvdisasm(nvdisasm: str, cubin: Path) -> str:
    """Code sections only (``-c``), with the line table and its inlining (``-gi``)."""
    proc = subprocess.run([nvdisasm, "-c", "-gi", str(cubin)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise ToolchainError(f"nvdisasm -c -gi {cubin} failed:\n{proc.stdout}{proc.stderr}")
    return proc.stdout


def _user_lines(plan) -> dict[str, list[str]]:
    """Real path → lines of every file of the snippet and every local header it includes."""
    files = {os.path.realpath(f.path): f.text.splitlines() for f in plan.files}
    for header in builder.local_headers(plan.files, plan.include_dirs):
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
        name = builder._demangle(f.name)
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


def _pick(items: list, kernel: str, name_of) -> list:
    """The items whose symbol demangles to ``kernel`` (else contains it), or an ArgumentError naming the kernels."""
    hits = [s for s in items if builder._demangle(name_of(s)) == kernel] or [s for s in items if kernel in name_of(s)]
    if not hits:
        known = ", ".join(builder._demangle(name_of(s)) for s in items) or "none"
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
    hits = _pick([s for s in sections if s[0]], kernel, lambda s: s[0])
    return "\n".join(line for _, body in hits for line in body).rstrip() + "\n"


# --- reading listings: instructions, counts, diffs -------------------------------------------------

_BRANCH = re.compile(r"^(@!?U?P\w+\s+)?(BRA|BRX|BSSY|CALL|JMP|JMX|SSY|PBK|PCNT|RET)\b")


def _functions_of(text: str) -> list[tuple[str, list[tuple[int, str, str]]]]:
    """A listing (:func:`sass`'s or cuobjdump's) as ``(function, [(address, predicate, text), ...])``,
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

    Either kind of listing works (:func:`sass`'s, with source lines, or ``raw=True``'s); source lines,
    addresses, encodings and padding never show as changes.
    """
    return "".join(difflib.unified_diff([line + "\n" for line in normalize_sass(old_sass)],
                                        [line + "\n" for line in normalize_sass(new_sass)],
                                        old_name, new_name))
