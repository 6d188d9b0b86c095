"""What a built kernel uses: resources, theoretical occupancy, PTX and SASS. No GPU needed.

``resources`` is the compile-only build's ptxas report; ``occupancy`` turns one kernel's report and a
launch configuration into active blocks and warps per SM with the resource that limits them; ``ptx``
and ``sass`` build exactly the unit jitlab builds and show its code with the user's source lines
between the instructions (the PTX's ``.loc``, the CUBIN's line table), through
:mod:`jitlab.tools.listing`, which also reads listings back (``sass_diff``, ``count_instructions``).

(The module is ``jitlab.tools.inspect``; it does not shadow the standard library's ``inspect``, which
absolute imports always find first.)
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

from jitlab.errors import ArgumentError, SnippetError
from jitlab.jit import api, builder, cache, diagnostics, nvcc_shell, toolchain
from jitlab.jit.flags import nvcc_command
from jitlab.jit.sources import has_cuda, sources_by_path
from jitlab.tools import listing
from jitlab.tools.listing import count_instructions, sass_diff  # noqa: F401  (inspect's public API, as the lessons use it)

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
    if not 1 <= block_size <= lim["max_threads_per_block"]:
        raise ArgumentError(f"block size {block_size}: a block has 1 to {lim['max_threads_per_block']} threads "
                            f"on {arch} (CUDA's limit)")
    if not 0 <= dynamic_smem <= lim["smem_per_block"]:
        raise ArgumentError(f"dynamic shared memory {dynamic_smem} bytes: a block may ask for 0 to "
                            f"{lim['smem_per_block']} bytes on {arch} (static shared memory included)")
    regs = int(resources.get("registers", 0))
    warps_per_block = -(-block_size // WARP)
    by: dict[str, int] = {}

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
    constant): ``build.resources``, built or found in the cache. ``arch`` may be a list.

    Raises:
        SnippetError: A C++ snippet (no CUDA kernels: it builds and runs on the CPU).
    """
    if not has_cuda(path):
        raise SnippetError(f"{path}: inspect shows the GPU resources of CUDA kernels, and this snippet is C++: it "
                           f"builds and runs on the CPU (`jitlab build {path}`, `jitlab check {path}`)")
    return api.build(path, arch=arch, compile_only=True, **options).resources


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

    opts = api.options(mode=mode, arch=[arch], defines=defines, cflags=cflags, cuda_cflags=cuda_cflags, ldflags=ldflags,
                       compile_only=True)  # builds carry -lineinfo
    plan, archs, parts = builder.prepare(path, opts)
    if not plan.cuda:
        raise ArgumentError(f"{path}: PTX is made from CUDA snippets (.cu); this one has none")
    toolchain.require_tools(True, compile_only=True)
    name = cache.module_name(plan.stem, cache.build_key(parts))
    with tempfile.TemporaryDirectory(prefix="jitlab-ptx-") as tmp:
        src, out = Path(tmp) / "cuda.cu", Path(tmp) / "cuda.ptx"
        src.write_text("\n".join(plan.device_sources))
        cmd = nvcc_command(plan, name, archs, opts, ["-ptx", str(src), "-o", str(out)])
        proc = nvcc_shell.run_nvcc(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            log = " ".join(cmd) + "\n" + proc.stdout + proc.stderr
            raise diagnostics.compile_error(f"{path} (nvcc -ptx, {archs[0]})", log, sources_by_path(plan))
        text = out.read_text()
    files = listing.ptx_files(text)
    if kernel:
        text = listing.ptx_entry(text, kernel)
    return listing.annotate_ptx(text, {str(f.path): f.text.splitlines() for f in plan.files}, files)


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
        The listing; :func:`listing.sass_diff`, :func:`listing.instructions` and
        :func:`listing.count_instructions` read it (and the raw one) without the source lines.

    Raises:
        ToolchainError: nvdisasm, or cuobjdump (nvcc builds and ``raw``), is missing, naming the pip package.
        ArgumentError: No kernel of that name.
    """

    nvdisasm = listing.tool("nvdisasm")
    cuobjdump = listing.tool("cuobjdump") if raw else None
    b = api.build(path, arch=[arch], compile_only=True, **options)  # builds carry -lineinfo
    if raw:
        return listing.cuobjdump_sass(cuobjdump, nvdisasm, b.artifact, kernel)
    with tempfile.TemporaryDirectory(prefix="jitlab-sass-") as tmp:
        texts = [listing.disassemble(nvdisasm, cubin) for cubin in listing.cubins(b, b.archs[0], Path(tmp))]
    functions = [f for text in texts for f in listing.parse_nvdisasm(text)]
    if kernel:
        functions = listing.pick(functions, kernel, lambda f: f.name)
    return listing.render_sass(functions, listing.user_lines(b.plan))
