"""The program NVRTC engine: a program's kernels compiled in process by NVRTC into a CUBIN its executable loads.

The program engine (:mod:`.program`) builds ``nvcc prog.cu -o program``, so a kernel-body edit is a whole
nvcc build (~1.2 s). Here the file is split as a torch-style file is (:func:`jitlab.jit.split.split`): the
device unit (kernels, ``__device__`` functions and variables) goes to NVRTC, a CUBIN for the GPU's arch with
line info (:func:`.nvrtc_torch.device_cubin`); the host unit (main and the host functions, kernel bodies
blanked) to the host compiler, linked with a generated slot unit (:mod:`.slots`) and CUDA's static runtime,
as nvcc links. After a kernel-body edit the host object, the slot unit and the executable are cache hits,
and the build is one NVRTC compile. Three cache entries, each keyed by what makes it::

    build_cache/objects/prog.device.cu.nvrtc-<key>/   the CUBIN: device unit text, name expressions, NVRTC, arch
    build_cache/objects/prog.program-<key>/            the executable: host and slot objects, link flags
    build_cache/prog_<key>/                            the build: program (a hard link to it) and program.cubin

The executable loads ``<its own path>.cubin`` (``/proc/self/exe``) at the first use of a kernel or device
variable, as nvcc's lazy loading would (the slot unit's ``JITLAB_SLOTS_ON_USE``, :data:`LOADER`). Each
build's folder holds its own CUBIN beside its own link to the one executable: no entry changes after it is
made, and runs of different versions at once each load their own kernels. What this engine cannot build
(:func:`unsuitable`, or :class:`~.nvrtc_torch.Unsuitable` raised while building) the builder hands to the
program engine with the one-line reason.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
from collections import Counter
from pathlib import Path

from jitlab import config
from jitlab.jit import cache, cachedir, deps, processes, toolchain
from jitlab.jit import split as split_mod
from jitlab.jit.engines import nvrtc, nvrtc_torch, objects, program, slots
from jitlab.jit.engines.nvrtc_torch import Unsuitable
from jitlab.jit.flags import Options
from jitlab.jit.plan import Flags, Manifest, Object, ProgramPlan, Unit, UnitError
from jitlab.jit.resources import parse_resource_usage
from jitlab.jit.sources import local_headers, user_include_dirs

#: What a build records as its engine (``Build.engine``), and what its progress line says compiles it.
ENGINE = "nvrtc-program"
COMPILER = "NVRTC"
#: The executable's name in the build's folder (the program engine's), and its CUBIN's beside it.
EXECUTABLE = program.EXECUTABLE
CUBIN = f"{EXECUTABLE}.cubin"

_ARCH_FLAG = re.compile(r"^(-gencode|-arch|--gpu-architecture|-code)\b")


def unsuitable(plan: ProgramPlan, opts: Options, archs: list[str]) -> str | None:
    """Why the NVRTC engine cannot build a CUDA program, in one line (``None``: it can try).

    It builds one ``.cu`` file whose split is sound, for one GPU arch on a machine that runs it: not
    compile-only or without a GPU (unless ``engine="nvrtc"`` asks), not a debug build, not dynamic
    parallelism or an ``extern`` device variable (nvcc's device link), not ``__managed__``, not an
    nvcc-only flag or one naming archs.
    """
    if len(plan.files) != 1 or plan.files[0].language != "cuda":
        return f"a program of {len(plan.files)} files (the NVRTC engine splits one .cu file)"
    if len(archs) != 1 or not archs[0].startswith("sm_"):
        return f"archs {', '.join(archs)} (the NVRTC engine loads one CUBIN, for one GPU arch)"
    if opts.engine != "nvrtc" and (opts.compile_only or not toolchain.gpu_available()):
        why = "compile-only" if opts.compile_only else "no CUDA GPU here to run it"
        return f"{why}: nvcc's executable holds its kernels, for wherever it runs"
    if opts.debug:
        return "debug=True (-G, -g): nvcc's debug build"
    s = split_file(plan)
    if s.reason:
        return f"its host and device code cannot be split: {s.reason}"
    text = re.sub(r"//[^\n]*|/\*.*?\*/", " ", s.device, flags=re.S)
    if "<<<" in text:
        return "a kernel launches a kernel (dynamic parallelism needs -rdc and nvcc's device link)"
    if re.search(r"\bextern\s+(__device__|__constant__)", text):
        return "an extern device variable (relocatable device code needs nvcc's device link)"
    try:
        slots.device_variables(s.device)
    except slots.NotSlottable as e:
        return str(e)
    refused = nvrtc_torch.nvrtc_flags(device_flags(opts))[1] + [f for f in opts.cuda_cflags if _ARCH_FLAG.match(f)]
    return f"nvcc-only flag {' '.join(refused)}" if refused else None


def split_file(plan: ProgramPlan) -> split_mod.Split:
    """The program's one file split into its device and host units (``reason`` set where it cannot be)."""
    f = plan.files[0]
    return split_mod.split(f, split_mod.header_texts(f, plan.include_dirs))


def device_flags(opts: Options) -> list[str]:
    """The nvcc flags the device code gets: the defines and the user's nvcc flags."""
    return [*(f"-D{k}" if v is None else f"-D{k}={v}" for k, v in opts.defines.items()), *opts.cuda_cflags]


def host_flags(nvcc: list[str]) -> list[str]:
    """What nvcc hands the host compiler of its flags: defines, include folders, the dialect, the
    optimization level (host code's, under nvcc) and ``-Xcompiler``'s."""
    out, given = [], False
    for f in nvcc:
        if given:
            out += f.split(",")
            given = False
        elif f in ("-Xcompiler", "--compiler-options"):
            given = True
        elif f.startswith(("-Xcompiler=", "--compiler-options=")):
            out += f.split("=", 1)[1].split(",")
        elif f.startswith(("-D", "-U", "-I", "-std=", "-O")):
            out.append(f)
    return out


def program_flags(plan: ProgramPlan, opts: Options) -> Flags:
    """The host and slot units' flags, as nvcc's host pass has them (no optimization unless asked, GNU
    C++17), and the link's as nvcc's: the user's ``ldflags``, then CUDA's static runtime."""
    cuda = toolchain.cuda_home() / "include"
    system = [f"-isystem{cuda}", *([f"-isystem{cuda / 'cccl'}"] if (cuda / "cccl").is_dir() else [])]
    defines = [f for f in device_flags(opts) if f.startswith("-D")]
    user = [*(f for f in host_flags(opts.cuda_cflags) if f not in defines), *opts.cflags]
    ld = [f"-L{toolchain.cuda_lib_dir()}", *opts.ldflags, "-lcudart_static", "-lrt", "-lpthread", "-ldl"]
    return Flags(includes=tuple(f"-I{d}" for d in plan.include_dirs), cxx=("-std=gnu++17",), cuda_include=tuple(system),
                 cxx_user=(*defines, *user), nvcc=(), nvcc_torch=(), ld=tuple(ld),
                 toolchain=tuple(sorted(toolchain.fingerprint(True).items())))


def key_parts(plan: ProgramPlan, archs: list[str], opts: Options, parts: dict) -> dict:
    """The program engine's key and NVRTC's version: keyed apart from nvcc's executable."""
    return {**program.key_parts(plan, archs, opts, parts), "engine": ENGINE, "nvrtc": nvrtc.version()}


def require_tools(plan: ProgramPlan, opts: Options) -> None:
    """The host compiler (NVRTC is there: :func:`nvrtc.unavailable` said so); no nvcc."""
    toolchain.require_tool(toolchain.cxx_path(), "c++")


def make(plan: ProgramPlan, name: str, folder: Path, archs: list[str], opts: Options) -> Manifest:
    """The host side compiled and linked (cache hits after a kernel edit), the device unit by NVRTC, and the
    build's folder: a hard link to the executable and its CUBIN.

    A build that could not be made is remembered under its key (:func:`refusal`), so that running the same
    program again goes to nvcc's cached executable at once, not through a failing compile first
    (``engine="nvrtc"`` tries again, to show NVRTC's error).

    Raises:
        Unsuitable: The split, the slots or the host compile cannot serve it, now or before (the builder takes nvcc).
        NvrtcError: NVRTC rejected the device unit.
    """
    memo = refusal(name)
    known = _read_reason(memo) if opts.engine != "nvrtc" else None
    if known:
        raise Unsuitable(known)
    try:
        return _made(plan, folder, archs, opts)
    except (Unsuitable, nvrtc.NvrtcError) as e:
        cachedir.make_dirs(memo.parent)
        cache.write_json(memo, {"reason": str(e) if isinstance(e, Unsuitable) else f"NVRTC could not compile it ({_first(e.log)})"})
        raise


def refusal(name: str) -> Path:
    """Where the reason a build of key ``name`` went to nvcc is kept."""
    return objects.objects_root() / "refused" / f"{name}.json"


def _read_reason(memo: Path) -> str | None:
    try:
        reason = json.loads(memo.read_text()).get("reason")
    except (OSError, ValueError, AttributeError):
        return None  # none, or unreadable: build it
    return reason if isinstance(reason, str) else None


def _made(plan: ProgramPlan, folder: Path, archs: list[str], opts: Options) -> Manifest:
    """:func:`make`'s build."""
    device, host = units(plan, opts)
    flags = program_flags(plan, opts)
    host_obj = _compiled(host, flags, plan.stem)
    try:
        found, wrapped = slots.find(host_obj.undefined, set(device.templates) | kernel_names(plan),
                                    slots.device_variables(device.text))
    except slots.NotSlottable as e:
        raise Unsuitable(str(e)) from None
    twice = [e for e, n in Counter(s.expression for s in found).items() if n > 1]
    if twice:
        raise Unsuitable(f"overloaded kernel {twice[0]} (one NVRTC name for two kernels)")
    options, _ = nvrtc_torch.nvrtc_flags(device_flags(opts))
    compiled = nvrtc_torch.device_cubin(plan, device, [s.expression for s in found], archs[0], options, False)
    for s in found:  # the executable looks each up by the host's symbol, so they must agree
        if compiled.kernels.get(s.expression) != s.symbol:
            raise Unsuitable(f"{s.name} is {compiled.kernels.get(s.expression)} in the CUBIN but {s.symbol} in the host code")
    slot_obj = _compiled(Unit(f"{plan.stem}.slots.cpp", "cxx", slot_text(found, wrapped)), flags, plan.stem)
    exe = linked([host_obj, slot_obj], flags, slots.link_flags(wrapped), plan.stem)
    artifact = placed(exe, folder)
    (folder / CUBIN).write_bytes(compiled.path.read_bytes())
    (folder / "build.log").write_text("\n".join([host_obj.log, slot_obj.log, compiled.log]))
    rows = [{"name": device.name, "compiler": "nvrtc", "cached": compiled.cached, "seconds": round(compiled.seconds, 3),
             "headers": ""}, *({"name": o.unit.name, "compiler": "cxx", "cached": o.cached, "seconds": round(o.seconds, 3),
                                "headers": ""} for o in (host_obj, slot_obj))]
    return cache.made(artifact, cubins={archs[0]: CUBIN}, companions={CUBIN: cache.file_sha256(folder / CUBIN)},
                      kernels=compiled.kernels, compile_only=False,
                      resources=parse_resource_usage(compiled.log), nvrtc=nvrtc.version(),
                      executable=str(exe.relative_to(config.cache_dir())),
                      slots=[[s.name, s.expression, s.kernel] for s in found], units=rows,
                      read=[str(exe), str(compiled.path), *(host_obj.read or ())], unstable=host_obj.read is None)


def units(plan: ProgramPlan, opts: Options) -> tuple[Unit, Unit]:
    """The program's device unit (for NVRTC) and host unit (for the host compiler), each with the local
    headers its file includes (part of its key).

    Raises:
        Unsuitable: The file cannot be split.
    """
    f, s = plan.files[0], split_file(plan)
    if s.reason:
        raise Unsuitable(f"its host and device code cannot be split: {s.reason}")
    headers = tuple(sorted(local_headers([f], plan.include_dirs, user_include_dirs(opts)).items()))
    return (Unit(f"{plan.stem}.device.cu", "nvcc", s.device, templates=frozenset(s.templates), source=str(f.path), deps=headers),
            Unit(f"{plan.stem}.host.cpp", "cxx", s.host, source=str(f.path), deps=headers))


def kernel_names(plan: ProgramPlan) -> set[str]:
    """Qualified names of the kernels the program's file defines."""
    return {fn.qualname for fn in plan.files[0].functions if fn.kind == "global"}


def _compiled(unit: Unit, flags: Flags, stem: str) -> Object:
    """A host or slot unit's cached object; one the host compiler rejects goes to nvcc (whose message is
    the one to show if the code is wrong: the host unit is the user's file with its kernels blanked)."""
    try:
        return objects.compile_unit(unit, flags, stem)
    except UnitError as e:
        raise Unsuitable(f"the host compiler rejected its host code without the kernels ({_first(e.log)})") from None


def _first(log: str) -> str:
    """A compiler's or linker's first error line, short."""
    lines = [ln.strip() for ln in log.splitlines() if ln.strip()]
    return next((ln for ln in lines if "error" in ln or "undefined reference" in ln), lines[0] if lines else "")[:200]


# ---- the executable ----------------------------------------------------------------------------------

#: The slot unit's program part: the CUBIN beside the executable, loaded on the first use of a slot.
LOADER = r"""
// The program's loader (generated, jitlab/jit/engines/nvrtc_program.py): its kernels are in the CUBIN
// jitlab wrote beside the executable, loaded at the first launch or symbol copy, as nvcc loads lazily.
namespace jitlab_rt {
static const char* const symbols[] = {@SYMBOLS@};

void* fill_on_use(Slot* s) {
  static std::once_flag once;
  std::call_once(once, [] {
    static std::vector<char> image;  // the runtime may read it while the library lives
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    std::string path = std::string(exe, n > 0 ? (size_t)n : 0) + ".cubin";
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "jitlab: %s is missing: this program's kernels are there (keep it beside the executable, "
                           "or build with engine='nvcc' for an executable that holds them)\n", path.c_str());
      return;
    }
    image.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    char message[1024] = "";
    if (jitlab_slots_load(image.data(), symbols, message, sizeof message) != 0)
      std::fprintf(stderr, "jitlab: the kernels in %s could not be loaded: %s\n", path.c_str(), message);
  });
  return s->handle.load(std::memory_order_acquire);
}
}  // namespace jitlab_rt
"""


# Before the slot unit's own text, whose visibility is hidden from its includes on: the C library's declarations.
_FIRST = "#define JITLAB_SLOTS_ON_USE 1\n#include <unistd.h>\n#include <fstream>\n#include <iterator>\n#include <vector>\n"


def slot_text(found: list[slots.Slot], wrapped: list[str]) -> str:
    """The program's slot unit: :func:`slots.unit_text` filling its slots on first use (:data:`LOADER`),
    each looked up in the CUBIN by its host symbol."""
    names = ", ".join(f'"{s.symbol}"' for s in found) or "nullptr"
    return f"{_FIRST}{slots.unit_text(found, wrapped)}{LOADER.replace('@SYMBOLS@', names)}"


def linked(objs: list[Object], flags: Flags, wrap: list[str], stem: str) -> Path:
    """The executable of the host and slot objects, from its own cache entry (keyed by the objects, which are
    content-keyed, and the link flags): one executable serves every kernel edit.

    Raises:
        Unsuitable: The link failed (nvcc's link, of the same code, says why).
    """
    ld = [*wrap, *flags.ld]
    key = cache.build_key({"format": config.FORMAT_VERSION, "engine": ENGINE, "objects": [str(o.path) for o in objs],
                           "ld": ld, "toolchain": flags.toolchain})

    def make(target: str, folder: Path) -> Manifest:
        cmd = [toolchain.require_tool(toolchain.cxx_path(), "c++"), *(str(o.path) for o in objs), "-o", EXECUTABLE, *ld]
        proc = processes.run(cmd, cwd=folder)
        (folder / "build.log").write_text(f"{shlex.join(cmd)}\n{proc.stdout}{proc.stderr}")
        if proc.returncode != 0:
            raise Unsuitable(f"its host code did not link without the kernels ({_first(proc.stderr)})")
        return cache.made(folder / EXECUTABLE, read=[str(o.path) for o in objs])

    entry = cache.find_or_make(f"{stem}.program-{key}", make, root=objects.objects_root(), reads=deps.ldflag_inputs(ld))
    return entry.folder / entry.manifest.artifact


def placed(exe: Path, folder: Path) -> Path:
    """The executable in the build's folder: a hard link (the same file; a copy where the file system
    has no links), so that ``/proc/self/exe`` names this folder and its CUBIN."""
    target = folder / EXECUTABLE
    try:
        os.link(exe, target)
    except OSError:
        shutil.copy2(exe, target)
    return target
