"""What a built kernel uses: resources, theoretical occupancy, PTX and SASS. No GPU needed.

``resources`` is the compile-only build's ptxas report; ``occupancy`` turns one kernel's report and a
launch configuration into active blocks and warps per SM with the resource that limits them; ``ptx``
and ``sass`` show the code nvcc made from exactly the unit jitlab builds, with the user's source
lines next to the PTX; ``sass_diff`` compares two SASS listings instruction by instruction.

(The module is ``jitlab.inspect``; it does not shadow the standard library's ``inspect``, which
absolute imports always find first.)
"""

from __future__ import annotations

import difflib
import os
import re
import subprocess
import tempfile
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

def sass(path, kernel: str | None = None, arch: str = "sm_90", **options) -> str:
    """The SASS of a compile-only ``-lineinfo`` build, from ``cuobjdump -sass``.

    Args:
        path: The snippet, as for :func:`jitlab.build` (``options`` too: ``defines=``, ``cuda_cflags=``, ...).
        kernel: Only this kernel's function (unmangled name, else a substring of the mangled one).
        arch: One ``sm_XY`` arch.

    Raises:
        ToolchainError: cuobjdump or nvdisasm (which cuobjdump runs) is missing, naming the pip package.
        ArgumentError: No kernel of that name.
    """
    import jitlab

    cuobjdump = _tool("cuobjdump")
    nvdisasm = _tool("nvdisasm")
    b = jitlab.build(path, arch=[arch], compile_only=True, **options)  # builds carry -lineinfo
    env = dict(os.environ, PATH=str(Path(nvdisasm).parent) + os.pathsep + os.environ.get("PATH", ""),
               NVDISASM_PATH=str(Path(nvdisasm).parent))
    proc = subprocess.run([cuobjdump, "-sass", str(b.artifact)], capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise ToolchainError(f"cuobjdump -sass {b.artifact} failed:\n{proc.stdout}{proc.stderr}")
    return _sass_function(proc.stdout, kernel) if kernel else proc.stdout


_FUNCTION = re.compile(r"^\s*Function\s*:\s*(\S+)")


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
    named = [(n, body) for n, body in sections if n]
    hits = [s for s in named if builder._demangle(s[0]) == kernel] or [s for s in named if kernel in s[0]]
    if not hits:
        known = ", ".join(builder._demangle(n) for n, _ in named) or "none"
        raise ArgumentError(f"no kernel {kernel!r} in the SASS (kernels: {known})")
    return "\n".join(line for _, body in hits for line in body).rstrip() + "\n"


_BRANCH = re.compile(r"^(@!?U?P\w+\s+)?(BRA|BRX|BSSY|CALL|JMP|JMX|SSY|PBK|PCNT|RET)\b")


def normalize_sass(text: str) -> list[str]:
    """Instruction text only: addresses (``/*0040*/``), encodings (``/* 0x... */``), branch targets,
    the fatbin header's ``identifier`` and blank lines removed; whitespace collapsed."""
    out = []
    for line in text.splitlines():
        line = re.sub(r"/\*\s*0x[0-9a-fA-F]+\s*\*/", "", line)  # encodings
        line = re.sub(r"/\*[0-9a-fA-F]{4,}\*/", "", line)  # addresses
        line = " ".join(line.split())
        if not line or line.startswith("identifier ="):
            continue
        if _BRANCH.match(line):
            line = re.sub(r"0x[0-9a-fA-F]+", "<addr>", line)
        out.append(line)
    return out


def sass_diff(old_sass: str, new_sass: str, old_name: str = "old", new_name: str = "new") -> str:
    """A unified diff of two SASS listings that shows only instruction changes (``""`` when equal)."""
    return "".join(difflib.unified_diff([line + "\n" for line in normalize_sass(old_sass)],
                                        [line + "\n" for line in normalize_sass(new_sass)],
                                        old_name, new_name))
