"""Code generation: parsed snippet files → a plan (:mod:`jitlab.jit.plan`): the sources, units and shims to build.

Two plans:

* **kernel-only** (:class:`~jitlab.jit.plan.KernelPlan`, no torch in the snippet): the user's code, then
  :mod:`jitlab.jit.shims`' ``extern "C"`` shims, one per ``__global__`` kernel and host function, as one
  C++ and one CUDA unit. No torch header is compiled; Python calls the shims through ctypes.
* **torch-style** (:class:`~jitlab.jit.plan.TorchPlan`): translation units, each compiled on its own: the
  user's files (a ``.cu`` that uses torch split into a device and a host unit) with torch's headers, each
  host unit ending with C-ABI entries for the functions it exports (:mod:`jitlab.jit.cabi`), or a generated
  binding unit that declares them and binds them with pybind11 (or the snippet's own ``PYBIND11_MODULE``,
  renamed to the build's module name, unless it is plain ``m.def`` lines, which entries bind as it says).

Every user file is copied in after a ``#line 1 "<its path>"`` directive, so compiler messages point
at the user's file and line, never at a generated one.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from jitlab.errors import SnippetError
from jitlab.jit import ctypes_map, preproc
from jitlab.jit.plan import GENERATED, KernelPlan, TorchPlan, Unit
from jitlab.jit.parse import Function, SourceFile, line_directive
from jitlab.jit.shims import shim_unit

# A torch-style plan's modules (binding, ops, the split …) are imported by the functions that make one: a
# kernel-only cache hit in a new process needs none of them (~40 ms of imports on a 2-core VM, ~7 ms on an H200).


TORCH_CUDA_HEADERS = "#include <torch/types.h>\n#include <cuda.h>\n#include <cuda_runtime.h>\n"
TORCH_CPP_HEADERS = "#include <torch/extension.h>\n"
#: What a torch-style ``.cu`` file without torch starts with.
CUDA_PRELUDE = "#include <cuda_runtime.h>\n#include <cassert>\n"
# Input-check macros the seeds and tutorials use without defining them.
CHECK_MACROS = """\
#ifndef CHECK_CUDA
#define CHECK_CUDA(x) TORCH_CHECK((x).device().is_cuda(), #x " must be a CUDA tensor")
#endif
#ifndef CHECK_CONTIGUOUS
#define CHECK_CONTIGUOUS(x) TORCH_CHECK((x).is_contiguous(), #x " must be contiguous")
#endif
#ifndef CHECK_INPUT
#define CHECK_INPUT(x) CHECK_CUDA(x); CHECK_CONTIGUOUS(x)
#endif
"""


def printing_functions(files: list[SourceFile]) -> set[str]:
    """Python names whose call may print: printf in their body or in anything they call, transitively.

    For a snippet with its own ``PYBIND11_MODULE``, each ``m.def("name", &f)`` maps the Python name to f.
    """
    by_name = {fn.name: fn for f in files for fn in f.functions}
    memo: dict[str, bool] = {}

    def prints(name: str, seen: frozenset = frozenset()) -> bool:
        if name in memo:
            return memo[name]
        fn = by_name.get(name)
        result = bool(fn) and (fn.prints or any(prints(c, seen | {name}) for c in fn.calls if c not in seen))
        memo[name] = result
        return result

    names = {py: cpp for f in files for py, cpp in f.pybind_defs.items()}
    if not names:
        names = {n: n for n in by_name}
    return {py for py, cpp in names.items() if prints(cpp)}


def with_line_directive(f: SourceFile, text: str | None = None) -> str:
    """The file's text after ``#line 1 "<path>"``, so diagnostics name the user's file and line."""
    body = f.text if text is None else text
    return f"{line_directive(f.path)}{body}\n"


def plan(files: list[SourceFile], stem: str, mode: str = "auto", defines: dict | None = None) -> KernelPlan | TorchPlan:
    """Decide kernel-only or torch-style, and generate the sources.

    Args:
        files: Parsed snippet files (headers are not in this list).
        stem: The snippet's name.
        mode: ``"auto"``, ``"kernel"`` or ``"torch"``.
        defines: The build's ``#define``s; functions in ``#if`` branches they leave out are dropped (:mod:`.preproc`).

    Raises:
        SnippetError: If there is nothing to call, a kernel-only signature cannot be mapped, or a
            CUDA snippet's path has a character the CUDA toolchain cannot take.
    """
    if mode not in ("auto", "kernel", "torch"):
        raise SnippetError(f"mode={mode!r}: use 'auto', 'kernel' or 'torch'")
    _check_cuda_paths(files)
    uses_torch = any(f.uses_torch for f in files)
    if mode == "kernel" and uses_torch:
        torchy = next(f for f in files if f.uses_torch)
        raise SnippetError(f"{torchy.path}: mode='kernel' but this file uses torch (headers, torch:: types or "
                           f"PYBIND11_MODULE); drop mode= to build it torch-style")
    kind = "torch" if (mode == "torch" or (mode == "auto" and (uses_torch or _needs_pybind(files)))) else "kernel"
    _require_something_to_call(files)
    files, left_out = preproc.compiled(files, defines or {})
    made = _kernel_plan(files, stem) if kind == "kernel" else _torch_plan(files, stem)
    return dataclasses.replace(made, skipped=left_out + made.skipped)


def _check_cuda_paths(files: list[SourceFile]) -> None:
    """Refuse a CUDA snippet with a double quote in its path, before nvcc or NVRTC fail on it obscurely.

    nvcc's option parser rejects a quote in ``-I`` (the snippet's folder is one), and ptxas one in
    the file name that line info (``-lineinfo``) records, however the ``#line`` directive escapes it.
    """
    if not any(f.language == "cuda" for f in files):
        return
    for f in files:
        if '"' in str(f.path):
            raise SnippetError(f'{f.path}: the CUDA toolchain cannot compile a snippet whose path has a double '
                               f'quote (`"`): nvcc and ptxas reject it; rename the folder or file without it')


def _needs_pybind(files: list[SourceFile]) -> bool:
    """C++ library types in an exported signature (``std::string``; not ``std::int64_t``) need pybind, not ctypes."""
    return any(fn.kind == "host" and not fn.static and any(
        "std::" in ctypes_map.strip_qualifiers(t) for t in [fn.returns, *(p.base for p in fn.params)])
        for f in files for fn in f.functions)


def _require_something_to_call(files: list[SourceFile]) -> None:
    if any(f.functions or f.pybind_module for f in files):
        return
    f = files[0]
    if any(x.has_main for x in files) and not any(x.parse_error for x in files):  # else the compiler speaks
        raise SnippetError(f"{f.path}: a program with only main(), nothing to call from Python: run it with "
                           f"jitlab.run_program({str(f.path)!r}) or `jitlab exec {f.path}`")
    from jitlab.jit import macros

    hint = macros.hint(files)
    if f.parse_error and not hint:
        line, col = f.parse_error
        src = f.text.splitlines()[line - 1] if line <= len(f.text.splitlines()) else ""
        hint = f"\n  the parser stopped at {f.path}:{line}:{col}:\n    {src}\n    {' ' * (col - 1)}^"
    raise NothingToCall(
        f"{', '.join(str(x.path) for x in files)}: no __global__ kernel or host function found; a snippet "
        f"defines at least one, e.g. `__global__ void scale(float* y, const float* x, float a, int n)`{hint}"
    )


class NothingToCall(SnippetError):
    """No kernel or host function found; the build's compiler reads the files first (:func:`jitlab.jit.builder.compiler_first`),
    so a syntax error the parser stumbled on is the compiler's message at its line."""


def _kernel_plan(files: list[SourceFile], stem: str) -> KernelPlan:
    cu = [f for f in files if f.language == "cuda"]
    cpp = [f for f in files if f.language == "cpp"]
    exported, skipped = [], program_notes(files)
    program = bool(skipped)
    for f in files:
        for fn in f.functions:
            if fn.internal:
                skipped.append((fn.name, internal_reason(fn)))
                continue
            if fn.template:
                skipped.append((fn.name, "template: instantiate it from a non-template kernel to call it"))
                continue
            why = overload_reason(fn, f) or ctypes_map.unmappable(fn)
            if why and fn.kind == "global" and not program:  # a kernel-only snippet's kernel must be callable
                ctypes_map.check_mappable(fn)
            if why:  # a host helper, or a program's own code: left out, never broken by a shim
                skipped.append((fn.name, why))
                continue
            exported.append(fn)
    _check_unique(exported, "rename one (a kernel-only snippet's files of one language are compiled together)")
    cuda_sources, cpp_sources = [], []
    if cu:
        cuda_sources = (
            ["#include <cuda_runtime.h>\n#include <cassert>\n#include <exception>\n"]
            + [with_line_directive(f) for f in cu]
            + [line_directive(f"{GENERATED}.cu") + shim_unit(functions_of(exported, cu), cuda=True)]
        )
    cpp_sources = ["#include <exception>\n"] + [with_line_directive(f) for f in cpp]
    if cpp:
        cpp_sources.append(line_directive(f"{GENERATED}.cpp") + shim_unit(functions_of(exported, cpp), cuda=False))
    return KernelPlan(stem=stem, cuda=bool(cu), files=files, include_dirs=_include_dirs(files), exported=exported,
                      skipped=skipped, printing=printing_functions(files), cpp_sources=cpp_sources,
                      cuda_sources=cuda_sources)


def _torch_plan(files: list[SourceFile], stem: str) -> TorchPlan:
    from jitlab.jit import binding, ops

    registered = ops.operators(files)
    bound = {} if registered else binding.module_functions(files)  # its own module's m.defs, through entries
    binds_itself = any(f.pybind_module for f in files) or bool(registered)
    exported, skipped = [], program_notes(files)
    user_types = _user_types(files)
    for f in files:
        for fn in f.functions:
            if binds_itself and not registered and fn.name not in bound:
                continue  # its own PYBIND11_MODULE decides what Python sees
            reason = (_not_bindable(fn, user_types) or overload_reason(fn, f)
                      or (ops.role(fn.name, files) if registered else ""))
            if reason:
                skipped.append((fn.name, reason))
            else:
                exported.append(fn)
    if bound and len(exported) != len(bound):  # one it binds is not bindable here: the block compiles as written
        exported, skipped, bound = [], [s for s in skipped if s[0] not in bound], {}
    _check_unique(exported, "rename one, or mark one `static` to keep it out of Python")
    if not binds_itself and not exported:
        raise SnippetError(
            f"{', '.join(str(f.path) for f in files)}: no host function to bind; a torch-style snippet defines "
            f"e.g. `torch::Tensor square(torch::Tensor x)`; kernels alone need no torch (drop the torch include)"
        )
    units, notes = torch_units(binding.unblocked(files) if bound else files, exported, binds_itself and not bound)
    return TorchPlan(stem=stem, cuda=any(f.language == "cuda" for f in files), files=files, include_dirs=_include_dirs(files), notes=notes,
                     exported=exported, skipped=skipped, printing=printing_functions(files), units=units,
                     binds_itself=binds_itself, ops=registered, entries=any(u.entries for u in units), bound=bound)


def torch_units(files: list[SourceFile], exported: list[Function], binds_itself: bool) -> tuple[list[Unit], list[str]]:
    """The translation units of a torch-style snippet, and a note for each file not split.

    A ``.cu`` file that uses torch is split (:func:`jitlab.jit.split.split`) into a device unit
    and a host unit; one that cannot be split correctly is one nvcc unit with torch's headers, as
    ``load_inline`` builds it. A ``.cu`` without torch is one nvcc unit; a ``.cpp`` is a host unit.
    Without the snippet's own ``PYBIND11_MODULE`` (or with one of plain ``m.def`` lines, blanked from the files
    given here: :func:`binding.module_functions`), each host unit ends with the C-ABI entries of the functions
    it defines (:mod:`jitlab.jit.cabi`), or, where a signature has a type no entry takes, a generated binding
    unit defines the module; a split file's own is a module unit of its own where it can be
    (:mod:`jitlab.jit.module_unit`).
    """
    from jitlab.jit import binding, header_sets, module_unit, ops
    from jitlab.jit import split as split_mod
    from jitlab.jit.pyargs import required_defaults

    units, notes, dirs, cuda = [], [], _include_dirs(files), any(f.language == "cuda" for f in files)
    for f in files:
        stem = f.path.stem
        text = rename_module(f)
        owns_module = bool(f.pybind_module)
        checks = CHECK_MACROS + ops.prelude(f)  # the prelude queues TORCH_LIBRARY registrations
        headers = split_mod.header_texts(f, dirs)
        umbrella = any(header_sets.includes_umbrella(h) for h in headers.values())  # the smallest set: header_sets.HEADERS
        if f.language == "cpp":
            registers = bool(ops.blocks(f))  # torch/library.h (the prelude); with a module of its own, pybind11: bind
            kind = ("full" if umbrella else "bind" if registers and owns_module else "host" if registers
                    else header_sets.binding_set(text, bodies=not cuda) if owns_module
                    else header_sets.host_set([text, *headers.values()]))
            units.append(Unit(f"{stem}.cpp", "cxx", checks + with_line_directive(f, text), torch=True, module=owns_module,
                              headers=kind, source=str(f.path)))
            continue
        if not f.uses_torch:
            units.append(Unit(f"{stem}.cu", "nvcc", CUDA_PRELUDE + with_line_directive(f), source=str(f.path)))
            continue
        s = split_mod.split(dataclasses.replace(f, text=text), headers)
        if s.reason:
            notes.append(f"{f.path.name} built as one translation unit: {s.reason}")
            units.append(Unit(f"{stem}.cu", "nvcc", TORCH_CUDA_HEADERS + checks + with_line_directive(f, text),
                              torch=True, module=owns_module, source=str(f.path)))
            continue
        units.append(Unit(f"{stem}.device.cu", "nvcc", s.device, templates=frozenset(s.templates), source=str(f.path)))
        host = s.host.replace(line_directive(f.path), checks + line_directive(f.path), 1)
        units += module_unit.host_units(stem, host, owns_module, umbrella, str(f.path))
    if any(ops.blocks(f) for f in files):
        units.append(ops.registry_unit())
    elif not binds_itself:
        units = binding.bound(units, exported)
    return units, notes + ([] if binds_itself else [n for n in map(required_defaults, exported) if n])


def functions_of(fns: list[Function], files: list[SourceFile]) -> list[Function]:
    """The functions among ``fns`` that ``files`` define, in order."""
    paths = {str(f.path) for f in files}
    return [fn for fn in fns if fn.path in paths]


def preludes(plan: KernelPlan | TorchPlan) -> tuple[str, str]:
    """What the plan puts before the user's C++ and CUDA code (headers, CHECK_* macros): ``(cpp, cuda)``.

    A kernel-only plan's are the first entry of each source list; a torch-style plan's are torch's headers
    and the CHECK_* macros (for CUDA files that use torch), as ``load_inline`` puts them. ``""`` for a
    language the plan does not have.
    """
    if isinstance(plan, KernelPlan):
        return (plan.cpp_sources[0] if plan.cpp_sources else ""), (plan.cuda_sources[0] if plan.cuda_sources else "")
    cu = [f for f in plan.files if f.language == "cuda"]
    cuda = "" if not cu else (TORCH_CUDA_HEADERS + CHECK_MACROS) if any(f.uses_torch for f in cu) else CUDA_PRELUDE
    return TORCH_CPP_HEADERS + CHECK_MACROS, cuda


def program_notes(files: list[SourceFile]) -> list[tuple[str, str]]:
    """``[("main", why)]`` for a whole program (a file defines ``main``), else ``[]``."""
    main = next((f for f in files if f.has_main), None)
    return [("main", f"the program's entry point: run it with jitlab.run_program({str(main.path)!r}) "
                     f"or `jitlab exec {main.path}`")] if main else []


def overload_reason(fn: Function, f: SourceFile) -> str:
    """Why ``fn`` is left out when ``f`` overloads its name (Python needs one function per name), or ``""``."""
    n = sum(1 for g in f.functions if g.name == fn.name and not g.internal and not g.template)
    return f"overloaded ({n} definitions in {f.path.name}): give each its own name to call it" if n > 1 else ""


def _user_types(files: list[SourceFile]) -> set[str]:
    """Names of the types the snippet declares itself (a generated unit that declares its functions cannot see them)."""
    found = set()
    for f in files:
        found |= set(re.findall(r"\b(?:struct|class|union|enum(?:\s+class)?)\s+(\w+)\s*(?:final\s*)?[:{]", f.text))
        found |= set(re.findall(r"\busing\s+(\w+)\s*=", f.text)) | set(re.findall(r"\}\s*(\w+)\s*;", f.text))
        found |= set(re.findall(r"\btypedef\b[^;{]*\(\s*[*&]\s*(\w+)\s*\)", f.text))  # a function type
        found |= set(re.findall(r"\btypedef\b[^;{(]*\b(\w+)\s*;", f.text))
    return found


def _not_bindable(fn: Function, user_types: set[str] = frozenset()) -> str:
    if fn.kind == "global":
        return "kernel: launched by the snippet's host functions"
    if fn.template:
        return "template"
    if fn.internal:
        return internal_reason(fn)
    if "::" in fn.qualname:
        return "in a namespace: bind it from a top-level function"
    named = {w for t in [fn.returns] + [p.base for p in fn.params] for w in re.findall(r"\w+", t)}
    if any(p.function for p in fn.params) or named & user_types:
        return "its signature names a function or a type the snippet declares: call it from the snippet's own code"
    types = [fn.returns] + [p.base for p in fn.params]
    if any(p.pointer for p in fn.params) or "*" in fn.returns or any(
        t.split()[-1].startswith(("cuda", "CU", "dim3", "__half", "__nv_")) for t in types if t.split()
    ):
        return "takes raw pointers or CUDA types (a launcher or helper): call it from a function taking tensors"
    return ""


def internal_reason(fn: Function) -> str:
    """Why an internal helper (``static``, ``inline``, ``constexpr``, anonymous namespace) is not exported."""
    if fn.internal == "anonymous namespace":
        return "in an anonymous namespace, a helper for the snippet's own code; move it out to call it from Python"
    return f"`{fn.internal}`, a helper for the snippet's own code; drop `{fn.internal}` to call it from Python"


def rename_module(f: SourceFile) -> str:
    """The file's text with its ``PYBIND11_MODULE(name, m)`` renamed to the build's module name.

    Seeds write ``PYBIND11_MODULE(example_kernels, m)``; the import name must carry the build key,
    so the copy (never the user's file) uses ``TORCH_EXTENSION_NAME``. Line numbers are unchanged.
    """
    if not f.pybind_module or f.pybind_module[0] == "TORCH_EXTENSION_NAME":
        return f.text
    _, start, end = f.pybind_module
    raw = f.text.encode("utf-8", "surrogateescape")
    return (raw[:start] + b"TORCH_EXTENSION_NAME" + raw[end:]).decode("utf-8", "surrogateescape")


def _check_unique(fns: list[Function], fix: str) -> None:
    """Raise if two exported functions share a name; ``fix`` is the advice that fits the plan."""
    seen: dict[str, Function] = {}
    for fn in fns:
        if fn.name in seen:
            other = seen[fn.name]
            raise SnippetError(
                f"{fn.path}:{fn.line}: `{fn.name}` is also defined at {other.path}:{other.line}; "
                f"Python needs one function per name: {fix}"
            )
        seen[fn.name] = fn


def _include_dirs(files: list[SourceFile]) -> list[str]:
    dirs: list[str] = []
    for f in files:
        d = str(f.path.parent)
        if d not in dirs:
            dirs.append(d)
    return dirs


def stem_of(paths: list[Path]) -> str:
    """The snippet's name: the file stem, or the folder name for a multi-file snippet."""
    if len(paths) == 1 and paths[0].is_file():
        return paths[0].stem
    return paths[0].name if paths[0].is_dir() else paths[0].stem
