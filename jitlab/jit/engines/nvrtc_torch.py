"""The torch-style NVRTC engine: a split's device unit compiled in process by NVRTC, its host side linked once.

The nvcc split (:mod:`.objects`) makes a kernel-body edit an nvcc compile of the device unit, a link and a
new ``.so`` (~2 s). Here the device unit goes to NVRTC (:mod:`.nvrtc`'s machinery, to one CUBIN per arch)
and the module is the host units, the binding unit and a generated slot unit (:mod:`.slots`) linked with
the host compiler; an operator snippet's (``TORCH_LIBRARY``) is its host units, the registry unit and the
slot unit, a library :mod:`jitlab.jit.oplib` registers. The host units' text is the nvcc split's (kernel
bodies blanked), so after a kernel-body edit their objects, the slot unit (it depends only on which symbols
the host names) and the linked module are cache hits, and the build is one NVRTC compile; the loader fills
the already imported module's (or registered library's) slots from the new CUBIN (:mod:`jitlab.jit.slotted`).
Three cache entries, each keyed by what makes it::

    build_cache/objects/features.device.cu.nvrtc-<key>/   the CUBIN: device unit text, name expressions, NVRTC, arch
    build_cache/objects/features.module-<key>/            the .so: host and slot objects, link flags
    build_cache/features_<key>/                           the build: the CUBINs, the slots, the module's path

Template instantiations the host objects name become NVRTC name expressions (``times_kernel<float, 4>``);
``c10::Half``/``c10::BFloat16`` are declared for device code by ``nvrtc_include/jitlab_c10.h``.
What this engine cannot build (:func:`unsuitable`, or :class:`Unsuitable` raised after the host compile)
the builder sends to the nvcc split with the one-line reason.
"""

from __future__ import annotations

import dataclasses
import io
import os
import re
import time
from pathlib import Path

from jitlab import config, progress
from jitlab.jit import cache, deps, diagnostics, toolchain
from jitlab.jit.engines import linker, nvrtc, nvrtc_pch, objects, slots, torch_headers
from jitlab.jit.flags import Options, object_flags
from jitlab.jit.plan import Flags, Manifest, Object, TorchPlan, Unit, UnitError
from jitlab.jit.resources import parse_resource_usage
from jitlab.jit.sources import sources_by_path

#: What a build records as its engine (``Build.engine``), and what its progress line says compiles it.
ENGINE = "nvrtc-torch"
COMPILER = "NVRTC"


class Unsuitable(Exception):
    """Found while building: the nvcc split must build it; the message is the one-line reason."""


# nvcc flags NVRTC takes as they are, or with another spelling (ProgramOptions' field), or can leave out
# (host-side, or what NVRTC does anyway); any other flag sends the build to nvcc.
_SKIP = re.compile(r"^(-gencode=.*|-arch=.*|--gpu-architecture=.*|-code=.*|--resource-usage|-lineinfo|-O\d|--expt-relaxed-constexpr"
                   r"|-Xcompiler=.*|--compiler-options=.*|-DTORCH_EXTENSION_NAME=.*)$")
_TAKES_VALUE = {"--compiler-options", "-Xcompiler", "-gencode", "-arch", "-code"}
_RDC = re.compile(r"^(-rdc|--relocatable-device-code|-dc|--device-c|-dlink|--device-link)\b")


def nvrtc_flags(nvcc: list[str]) -> tuple[dict, list[str]]:
    """The ProgramOptions fields an nvcc flag list asks for, and the flags NVRTC cannot take."""
    out: dict = {"define_macro": [], "undefine_macro": [], "ptxas_options": ["-v"]}
    refused, skip_next = [], False
    for i, f in enumerate(nvcc):
        if skip_next:
            skip_next = False
        elif f in _TAKES_VALUE:
            skip_next = True
        elif f.startswith("-D"):
            k, eq, v = f[2:].partition("=")
            out["define_macro"].append((k, v) if eq else k)
        elif f.startswith("-I") and len(f) > 2:
            out.setdefault("include_path", []).append(f[2:])
        elif f.startswith("-U"):
            out["undefine_macro"].append(f[2:])
        elif f.startswith("-std="):
            out["std"] = f[5:]
        elif f in ("--use_fast_math", "-use_fast_math"):
            out["use_fast_math"] = True
        elif f.startswith(("-Xptxas=", "--ptxas-options=")):
            out["ptxas_options"] += f.split("=", 1)[1].split(",")
        elif f.startswith(("--maxrregcount=", "-maxrregcount=")):
            out["max_register_count"] = int(f.split("=", 1)[1])
        elif not _SKIP.match(f):
            refused.append(f)
    return out, refused


def unsuitable(plan, opts: Options, archs: list[str] = ()) -> str | None:
    """Why the NVRTC engine cannot build a torch-style plan, in one line (``None``: it can try).

    It builds a split torch-style snippet (one device unit without torch) for a GPU, operators
    (``TORCH_LIBRARY``) included: not one built as one unit, not relocatable device code or dynamic parallelism (nvcc's device link), not a
    ``__managed__`` variable, not an nvcc-only flag (``-G``, ``-rdc``, ``--extended-lambda`` …).
    """
    if plan.kind != "torch" or not plan.cuda:
        return "not a torch-style CUDA snippet"
    device = [u for u in plan.units if u.compiler == "nvcc"]
    whole = [u for u in device if u.torch]
    if whole:
        return f"{whole[0].name} is built as one unit with torch's headers (not split)"
    if len(device) != 1:
        return f"{len(device)} device units (the NVRTC engine loads one CUBIN)" if device else "no device code"
    text = re.sub(r"//[^\n]*|/\*.*?\*/", " ", device[0].text, flags=re.S)
    if "<<<" in text:
        return "a kernel launches a kernel (dynamic parallelism needs -rdc and nvcc's device link)"
    if re.search(r"\bextern\s+(__device__|__constant__)", text):
        return "an extern device variable (relocatable device code needs nvcc's device link)"
    ptx = [a for a in archs if a.startswith("compute_")]
    if ptx:
        return f"PTX for {ptx[0]} (TORCH_CUDA_ARCH_LIST's +PTX) goes into nvcc's fatbinary; the NVRTC engine loads CUBINs"
    rdc = [f for f in opts.cuda_cflags if _RDC.match(f)]
    if rdc:
        return f"relocatable device code ({rdc[0]}) needs nvcc's device link"
    _, refused = nvrtc_flags([f for f in opts.cuda_cflags])
    if refused:
        return f"nvcc-only flag {' '.join(refused)}"
    try:
        slots.device_variables(device[0].text)
    except slots.NotSlottable as e:
        return str(e)
    return None


def key_parts(plan: TorchPlan, archs: list[str], opts: Options, parts: dict) -> dict:
    """The plan's key parts and NVRTC's version: keyed apart from the nvcc split."""
    return {**parts, "engine": ENGINE, "nvrtc": nvrtc.version()}


def require_tools(plan: TorchPlan, opts: Options) -> None:
    """The host compiler (NVRTC is there: :func:`nvrtc.unavailable` said so); no nvcc, no ninja."""
    toolchain.require_tools(False, opts.compile_only, ninja=False)


def make(plan: TorchPlan, name: str, folder: Path, archs: list[str], opts: Options) -> Manifest:
    """The host side compiled and linked (cache hits after a kernel edit), the device unit by NVRTC.

    Raises:
        Unsuitable: The host unit needs what the slots cannot give (the builder takes the nvcc split).
        NvrtcError: NVRTC rejected the device unit.
        CompileError: A host unit failed to compile, or the module to link.
    """
    for note in plan.notes:
        progress.say(f"jitlab: {note}")
    flags = object_flags(plan, archs, opts)
    sources = sources_by_path(plan)
    torch_headers.check_cuda_includes(sources, (*flags.includes, *flags.cxx, *flags.cuda_include))
    device = next(u for u in plan.units if u.compiler == "nvcc")
    host = objects.compile_all([u for u in plan.units if u.compiler == "cxx"], flags, plan.stem, sources, cuda=True)
    try:
        found, wrapped = slots.find([s for o in host for s in o.undefined], kernel_names(plan, device),
                                    slots.device_variables(device.text))
    except slots.NotSlottable as e:
        raise Unsuitable(str(e)) from None
    why = slots.unsupported_types(found)
    if why:
        raise Unsuitable(why)
    options, refused = nvrtc_flags(list(flags.nvcc))
    if refused:
        raise Unsuitable(f"nvcc-only flag {' '.join(refused)}")
    compiled = {arch: device_cubin(plan, device, [s.expression for s in found], arch, options, opts.debug)
                for arch in archs}
    slot_unit = Unit(f"{plan.stem}.slots.cpp", "cxx", slots.unit_text(found, wrapped))
    library, module = linked_module([*host, objects.compile_unit(slot_unit, flags, plan.stem)], flags,
                                    slots.link_flags(wrapped), plan.stem, opts.compile_only)
    files, logs = {}, []
    for arch, c in compiled.items():
        files[arch] = f"{plan.stem}.{arch}.cubin"
        (folder / files[arch]).write_bytes(c.path.read_bytes())
        logs.append(c.log)
    (folder / "build.log").write_text("\n".join([*(o.log for o in host), *logs]))
    first = compiled[archs[0]]
    # The device unit's row (one for all its archs) first, as the nvcc split lists it: a kernel edit shows
    # it compiled and every host unit cached.
    device_row = {"name": device.name, "compiler": "nvrtc", "cached": all(c.cached for c in compiled.values()),
                  "seconds": round(sum(c.seconds for c in compiled.values()), 3), "headers": ""}
    return cache.made(folder / files[archs[0]], cubins=files, kernels=first.kernels, compile_only=opts.compile_only,
                      resources=parse_resource_usage("\n".join(logs)), nvrtc=nvrtc.version(),
                      library=str(library.relative_to(config.cache_dir())), module=module,
                      slots=[[s.name, s.expression, s.kernel] for s in found], notes=list(plan.notes),
                      read=[str(library), *(str(c.path) for c in compiled.values()), *(p for o in host for p in o.read or ())],
                      unstable=any(o.read is None for o in host),
                      units=[device_row, *({"name": o.unit.name, "compiler": o.unit.compiler, "cached": o.cached,
                                            "seconds": round(o.seconds, 3), "headers": o.headers} for o in host)])


def kernel_names(plan, device: Unit) -> set[str]:
    """Qualified names of the kernels (and kernel templates) the device unit's file defines."""
    return {fn.qualname for f in plan.files if str(f.path) == device.source
            for fn in f.functions if fn.kind == "global"} | set(device.templates)


# ---- the device unit through NVRTC ------------------------------------------------------------------

_INCLUDE = re.compile(r"^[ \t]*#[ \t]*include[ \t]*<([^>]+)>.*$", re.MULTILINE)


def device_source(text: str, expressions: list[str], pch: bool = False) -> str:
    """The device unit as NVRTC compiles it: ``jitlab_nvrtc.h`` (and ``jitlab_c10.h`` when an instantiation
    names ``c10::Half``/``c10::BFloat16``) first, and each ``#include <…>`` of a host header NVRTC has not
    (``<vector>``, ``<unistd.h>``: host code's, kept in the device unit by the split) blanked, lines kept; with
    ``pch``, the end of the part NVRTC precompiles marked after jitlab's headers (:data:`nvrtc_pch.STOP`)."""
    def keep(m: re.Match) -> str:
        name = m.group(1).strip()
        return m.group(0) if nvrtc.DEVICE_HEADER.match(name) or (nvrtc.SHIMS / name).is_file() else ""

    c10 = "#include <jitlab_c10.h>\n" if any("c10::" in e for e in expressions) else ""
    stop = nvrtc_pch.STOP if pch else ""
    return f"#include <jitlab_nvrtc.h>\n#include <cstdint>\n#include <cstddef>\n{c10}{stop}{_INCLUDE.sub(keep, text)}"


@dataclasses.dataclass(frozen=True)
class DeviceCubin:
    """The device unit compiled for one arch (its own cache entry)."""

    path: Path
    kernels: dict[str, str]  # name expression -> lowered symbol
    log: str
    cached: bool
    seconds: float


def device_cubin(plan, device: Unit, expressions: list[str], arch: str, options: dict, debug: bool) -> DeviceCubin:
    """The device unit's CUBIN for one arch, from its own cache entry (keyed by the text NVRTC compiles, the
    name expressions, the options, NVRTC's version and the arch): a host edit leaves it a hit.

    Returns:
        The CUBIN, its name expressions' lowered symbols, NVRTC's log, and whether it was a hit.

    Raises:
        NvrtcError: NVRTC rejected it.
    """
    text = device_source(device.text, expressions)
    fields = dict(options)
    includes = [*nvrtc.include_path(plan), *fields.pop("include_path", [])]
    fields.update(include_path=includes, debug=debug, lineinfo=not debug)
    key = cache.build_key({"format": config.FORMAT_VERSION, "engine": ENGINE, "unit": device.name, "text": text,
                           "expressions": expressions, "options": repr(sorted(fields.items())), "arch": arch,
                           "nvrtc": nvrtc.version(), "deps": device.deps})

    def make(target: str, folder: Path) -> Manifest:
        from jitlab.jit import cudacore  # lazy: cuda.core costs ~0.2 s to import

        log = io.StringIO()
        core = cudacore.module()
        try:
            with progress.doing(f"compiling {device.name} (NVRTC, {arch})"):
                with nvrtc_pch.borrowed(nvrtc.version(), core.ProgramOptions, device.name) as pch:
                    made = nvrtc_pch.fields(pch, {"name": device.name, "arch": arch, **_opts(fields)})
                    compiled = device_source(device.text, expressions, pch is not None)  # `text`, marked
                    obj = core.Program(compiled, "c++", core.ProgramOptions(**made)).compile(
                        "cubin", name_expressions=expressions, logs=log)
        except Exception as e:  # cuda.core's NVRTCError carries the log
            raise nvrtc.NvrtcError(nvrtc.log_of(e, log.getvalue())) from None
        cubin = folder / f"{device.name}.{arch}.cubin"
        cubin.write_bytes(bytes(obj.code))
        out = log.getvalue().replace("\x00", "").strip()
        (folder / "build.log").write_text(out)
        names = {k: (v.decode() if isinstance(v, bytes) else str(v)) for k, v in cudacore.symbol_mapping(obj).items()}
        read = deps.scanned_includes(text, Path(device.source).parent, includes, {})
        return cache.made(cubin, kernels=names, read=read or [], unstable=read is None)

    t0 = time.perf_counter()
    entry = cache.find_or_make(f"{device.name}.nvrtc-{key}", make, root=objects.objects_root(), known=dict(device.deps),
                               skip=[device.source] if device.source else [])
    log = (entry.folder / "build.log").read_text(errors="replace") if (entry.folder / "build.log").is_file() else ""
    return DeviceCubin(entry.folder / entry.manifest.artifact, dict(entry.manifest.kernels or {}), log, entry.cached,
                       0.0 if entry.cached else time.perf_counter() - t0)


def _opts(fields: dict) -> dict:
    """ProgramOptions' fields, empty lists as ``None`` (cuda.core refuses an empty macro list on some versions)."""
    return {k: (v or None) if isinstance(v, list) else v for k, v in fields.items()}


# ---- the module --------------------------------------------------------------------------------------

def linked_module(objs: list[Object], flags: Flags, wrap: list[str], stem: str, compile_only: bool) -> tuple[Path, str]:
    """The ``.so`` of the host, binding and slot objects, from its own cache entry (keyed by the objects,
    which are content-keyed, and the link flags), and the name it imports as (which names the entry too,
    so one module serves every kernel edit).

    Compile-only (no GPU here, perhaps a CPU build of torch): libraries this machine lacks are left out
    of the link (a shared library may leave symbols undefined), so the link is still checked.
    """
    ld = [*flags.ld, *wrap]
    if compile_only:
        ld = _present(ld)
    key = cache.build_key({"format": config.FORMAT_VERSION, "engine": ENGINE, "objects": [str(o.path) for o in objs],
                           "ld": ld, "toolchain": flags.toolchain})
    module = f"{objects.identifier(stem)}_slots_{key[:16]}"

    def make(target: str, folder: Path) -> Manifest:
        try:
            with progress.doing("linking"):
                so = linker.link(objs, module, folder, dataclasses.replace(flags, ld=tuple(ld)))
        except UnitError as e:
            raise diagnostics.compile_error(f"{stem} (link)", e.log, {}) from None
        return cache.made(so, read=[str(o.path) for o in objs])

    entry = cache.find_or_make(f"{stem}.module-{key}", make, root=objects.objects_root())
    return entry.folder / entry.manifest.artifact, module


def _present(ld: list[str]) -> list[str]:
    """``ld`` less the ``-lNAME`` whose library is in none of its ``-L`` folders (nor the linker's own)."""
    dirs = [f[2:] for f in ld if f.startswith("-L")]
    out = []
    for f in ld:
        if f.startswith("-l") and dirs and not any(os.path.exists(os.path.join(d, f"lib{f[2:]}.so")) for d in dirs):
            if f[2:] not in ("stdc++", "m", "c", "dl", "pthread"):
                continue
        out.append(f)
    return out
