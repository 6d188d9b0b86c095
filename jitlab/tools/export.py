"""``jitlab export``: a snippet as an installable Python package, built the seeds' way (``setup.py``).

Seeds 000 and 002 build their kernels as a setuptools package with torch's ``CUDAExtension`` and
``BuildExtension``; ``export()`` writes that package for any snippet, so a kernel grown in the
playground can be installed where jitlab is not::

    <out>/setup.py           CUDAExtension (a snippet with .cu files) or CppExtension, BuildExtension
    <out>/pyproject.toml     setuptools backend and what it needs (setuptools, wheel); build with
                             `pip install --no-build-isolation .`, against this environment's torch
    <out>/README.md          how to build, install and call it
    <out>/<name>/__init__.py imports torch, then the compiled extension ``<name>._C``
    <out>/csrc/...           the snippet's files and local headers, unchanged
    <out>/csrc/jitlab_*      the generated units, the same ones ``jitlab.load`` compiles:
        jitlab_cuda.cu       the snippet's .cu files (#included) after jitlab's prelude; kernel-only
                             snippets add one ``extern "C"`` launcher per kernel (jit.shims)
        jitlab_<stem>.device.cu, .host.cpp   a torch-style .cu file split as jitlab.load splits it
                             (kernels for nvcc without torch, host code with it: :mod:`export_split`)
        jitlab_cpp.cpp       kernel-only C++ files and their call shims
        jitlab_module.cpp    the Python module: for torch-style snippets the .cpp files, declarations
                             and ``PYBIND11_MODULE`` with ``m.def`` per host function (what load_inline's
                             ``functions=`` makes); for kernel-only ones a torch binding per kernel
                             (tensors in, dtype/device/contiguity checked, torch's current stream)

A snippet with its own ``PYBIND11_MODULE(example_kernels, m)`` keeps it: the extension is then named
``<name>.example_kernels``, so not even the module name in the user's file changes. An operator snippet
(``TORCH_LIBRARY``) binds nothing: its ``jitlab_module.cpp`` holds its ``.cpp`` files on torch's types and
an empty module, whose import loads the library and so registers the operators; ``__init__.py`` makes
each one an attribute (``<name>.scale`` is ``torch.ops.myops.scale``).

File and folder names reach the generated Python only as escaped literals, and the package is written
without following links and with the user's umask (:mod:`jitlab.tools.package_files`).

The files' fixed text is in ``templates/`` (``string.Template``: ``$field``); the module's C++ (the
kernel-only bindings and their checks, the torch-style ``m.def`` list) is :mod:`jitlab.tools.bindings`'.
"""

from __future__ import annotations

import importlib.metadata
import keyword
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import torch

from jitlab.errors import SnippetError
from jitlab.jit import binding, codegen, flags, header_sets, shims, toolchain
from jitlab.jit import sources as jsources
from jitlab.jit.launch import py_name
from jitlab.jit.parse import SourceFile, language_of, parse_file
from jitlab.jit.plan import KernelPlan, TorchPlan
from jitlab.tools import export_split, package_files
from jitlab.tools.bindings import kernel_module, operators, ops_module, pybind_module, render

CUDA_UNIT = "jitlab_cuda.cu"
CPP_UNIT = "jitlab_cpp.cpp"
MODULE_UNIT = "jitlab_module.cpp"


@dataclass
class Package:
    """What ``export()`` writes, before it writes it.

    Attributes:
        name: The Python package name (``import name``).
        extension: The compiled module inside it (``_C``, or the snippet's own PYBIND11_MODULE name).
        plan: The snippet's plan (kernel-only or torch-style).
        root: The folder ``csrc/`` mirrors (the snippet's files and headers keep their layout under it).
        files: Relative path → contents, every file of the package.
        units: The sources setup.py compiles (relative paths).
        include_dirs: Folders searched for the snippet's local headers (relative paths).
        nvcc_flags: Extra nvcc flags.
        names: The Python functions, when known.
    """

    name: str
    extension: str
    plan: KernelPlan | TorchPlan
    root: Path
    files: dict[str, str] = field(default_factory=dict)
    units: list[str] = field(default_factory=list)
    include_dirs: list[str] = field(default_factory=list)
    nvcc_flags: list[str] = field(default_factory=list)
    names: list[str] = field(default_factory=list)


def export(path, out_dir, name: str | None = None, *, force: bool = False) -> Path:
    """Write ``path``'s snippet as a Python package with a ``setup.py`` into ``out_dir``.

    Build it with ``pip install --no-build-isolation <out_dir>`` (or ``python setup.py build_ext
    --inplace`` inside it); then ``import name`` works without jitlab.

    Args:
        path: A ``.cu``/``.cpp`` file, a folder of them, or a list (as for ``jitlab.load``).
        out_dir: The package folder; created if missing.
        name: The Python package name; default: the snippet's name.
        force: Overwrite the package's files in a non-empty ``out_dir`` (other files there are kept).

    Returns:
        The package folder, absolute.

    Raises:
        SnippetError: The snippet cannot be read or mapped, the name is not a module name, a file
            name holds a quote or a control character (C++ cannot quote it), ``out_dir`` is not empty
            (without ``force``) or holds the snippet itself, or a file or folder the package writes
            there is a symbolic link (never written through).
    """
    sources = jsources.collect_sources(path)
    name = module_name(path, name)
    files = [parse_file(p) for p in sources]
    plan = codegen.plan(files, name)
    headers = [Path(h) for h in jsources.local_headers(files, plan.include_dirs)]
    out = Path(out_dir).expanduser().resolve()
    check_out_dir(out, sources + headers, force)
    pkg = package(plan, name, headers)
    package_files.write(out, pkg.files)  # atomically, never through a link, with the user's umask
    return out


def module_name(path, name: str | None = None) -> str:
    """The package name: ``name``, or the snippet's name; checked to be importable.

    Raises:
        SnippetError: Naming the fix (``--name``) with a name that would work.
    """
    paths = [path] if isinstance(path, (str, Path)) else list(path)
    chosen = name if name is not None else codegen.stem_of([Path(p) for p in paths])
    what = "--name / name=" if name is not None else "the snippet's name; pass --name / name="
    if not (chosen.isascii() and chosen.isidentifier()) or keyword.iskeyword(chosen):
        fix = re.sub(r"\W", "_", chosen.encode("ascii", "replace").decode()) or "kernels"
        fix = f"k{fix}" if fix[0].isdigit() else fix + ("_" if keyword.iskeyword(fix) else "")
        raise SnippetError(f"{chosen!r} ({what}) is not a Python module name: use letters, digits and _ "
                           f"(not first), e.g. --name {fix}")
    if chosen in sys.stdlib_module_names or chosen in ("torch", "jitlab"):
        raise SnippetError(f"{chosen!r} would hide the `{chosen}` module when imported; choose another name "
                           f"with --name / name=, e.g. --name {chosen}_kernels")
    return chosen


def check_out_dir(out: Path, inputs: list[Path], force: bool) -> None:
    """Refuse a package folder that is a file, holds the snippet, or has files in it (unless ``force``).

    Raises:
        SnippetError: Naming ``--force`` or another folder.
    """
    if out.exists() and not out.is_dir():
        raise SnippetError(f"{out}: exists and is not a folder; choose another --out")
    inside = [p for p in inputs if p.resolve().is_relative_to(out)]
    if inside:
        raise SnippetError(f"{out} holds the snippet itself ({inside[0]}); export to a folder outside it, "
                           f"e.g. --out {out / (inside[0].stem + '_package')}")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise SnippetError(f"{out} is not empty; pass --force (force=True) to overwrite the package's files "
                           f"there, or choose another --out")


# ---- what building it needs -----------------------------------------------------------------------
def build_needs(path) -> tuple[str, list[str]]:
    """What building the exported package needs, and what of it this environment lacks.

    The package builds where ``pip install --no-build-isolation`` runs, against that environment's
    torch; this checks the environment jitlab runs in, the usual place to install it.

    Args:
        path: The snippet, as for :func:`export`.

    Returns:
        ``(needs, missing)``: one sentence saying what the package's ``setup.py`` needs; then one
        line per thing this environment lacks, each naming the fix (empty when it can build here).

    Raises:
        SnippetError: The snippet cannot be read.
    """
    cuda = any(language_of(Path(p)) == "cuda" for p in jsources.collect_sources(path))
    needs = "a C++ compiler and torch (the extension is compiled against the torch it runs with)"
    if cuda:
        needs = ("a CUDA build of torch, nvcc (a CUDA toolkit) of the same CUDA major version and a C++ compiler "
                 "(the package has CUDA sources)")
    missing = []
    if not toolchain.cxx_path():
        missing.append("a C++ compiler ($CXX or `c++`): install one, e.g. `sudo apt-get install g++`")
    if cuda and torch.version.cuda is None:
        missing.append(f"a CUDA build of torch: this torch ({torch.__version__}) is CPU-only, so the package does not "
                       "build here; install a CUDA build (https://pytorch.org/get-started/locally/)")
    if cuda and not toolchain.nvcc_path():
        major = f" {torch.version.cuda.split('.')[0]}.x" if torch.version.cuda else ""
        missing.append(f"nvcc (looked in $CUDA_HOME/bin, on PATH and in {toolchain.DEFAULT_CUDA_HOME}): install the "
                       f"CUDA toolkit{major} and set CUDA_HOME to its folder")
    elif cuda and torch.version.cuda and (toolchain.nvcc_version() or "").split(".")[0] != torch.version.cuda.split(".")[0]:
        missing.append(f"nvcc of torch's CUDA major version: nvcc is CUDA {toolchain.nvcc_version()}, torch was built "
                       f"with CUDA {torch.version.cuda}; point CUDA_HOME at a CUDA {torch.version.cuda.split('.')[0]}.x toolkit")
    setuptools = _version_of("setuptools")
    if setuptools is None:
        missing.append("setuptools: `pip install setuptools wheel`")
    elif setuptools < (70, 1) and _version_of("wheel") is None:
        missing.append(f"the `wheel` package, which setuptools {'.'.join(map(str, setuptools))} needs to build a wheel "
                       "(else pip stops with `invalid command 'bdist_wheel'`): `pip install wheel` first")
    return needs, missing


def _version_of(dist: str) -> tuple[int, ...] | None:
    """An installed distribution's version as numbers (``(65, 5, 0)``), without importing it; None if absent."""
    try:
        text = importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None
    return tuple(int(n) for n in re.findall(r"\d+", text)[:3])


# ---- the package's contents ---------------------------------------------------------------------
def package(plan: KernelPlan | TorchPlan, name: str, headers: list[Path]) -> Package:
    """Every file of the package for ``plan``: sources, generated units, setup.py, README, __init__."""
    user = [f.path for f in plan.files] + headers
    root = Path(os.path.commonpath([p.parent for p in user]))
    own = next((f.pybind_module[0] for f in plan.files if f.pybind_module), None)
    extension = own if own and own != "TORCH_EXTENSION_NAME" else "_C"
    pkg = Package(name=name, extension=extension, plan=plan, root=root)
    package_files.check_names([_rel(pkg, p) for p in user])
    for p in user:
        pkg.files[f"csrc/{_rel(pkg, p)}"] = _read_as_is(p)
    pkg.include_dirs = sorted({_csrc_dir(pkg, Path(d)) for d in plan.include_dirs})
    if plan.kind == "kernel":
        _kernel_units(pkg)
    else:
        _torch_units(pkg)
    pkg.files["setup.py"] = setup_py(pkg)
    pkg.files["pyproject.toml"] = render("pyproject.toml.tmpl")
    pkg.files[f"{name}/__init__.py"] = init_py(pkg)
    pkg.files["README.md"] = readme(pkg)
    return pkg


def _read_as_is(path: Path) -> str:
    """A file's text exactly (line endings and undecodable bytes kept), so its copy is byte for byte the same."""
    with open(path, encoding="utf-8", errors="surrogateescape", newline="") as f:
        return f.read()


def _rel(pkg: Package, p: Path) -> str:
    """A user file's path under ``csrc/`` (posix)."""
    return Path(p).relative_to(pkg.root).as_posix()


def _csrc_dir(pkg: Package, d: Path) -> str:
    rel = d.relative_to(pkg.root).as_posix()
    return "csrc" if rel == "." else f"csrc/{rel}"


def _includes(pkg: Package, files: list[SourceFile]) -> str:
    return "".join(f'#include "{_rel(pkg, f.path)}"\n' for f in files)


def _by_language(plan: KernelPlan | TorchPlan) -> tuple[list[SourceFile], list[SourceFile]]:
    return [f for f in plan.files if f.language == "cuda"], [f for f in plan.files if f.language == "cpp"]


def _torch_units(pkg: Package) -> None:
    """Torch-style: jitlab's units, the user's files #included where load_inline gets their text, or split."""
    plan = pkg.plan
    cu, cpp = _by_language(plan)
    cpp_prelude, cuda_prelude = codegen.preludes(plan)
    split, rest = export_split.split_units(cu, {str(f.path): _rel(pkg, f.path) for f in cu}, plan.include_dirs)
    pkg.files.update(split)
    pkg.units += list(split)
    if rest:  # the files not split: one nvcc unit, with torch's headers when one of them uses torch
        pkg.files[f"csrc/{CUDA_UNIT}"] = (
            f"// {pkg.name}'s CUDA unit, generated by `jitlab export`: the snippet's .cu files after what\n"
            f"// jitlab.load puts before them (torch headers and the CHECK_* macros, when they use torch).\n"
            + (cuda_prelude if any(f.uses_torch for f in rest) else codegen.CUDA_PRELUDE) + _includes(pkg, rest))
        pkg.units.append(f"csrc/{CUDA_UNIT}")
    if plan.ops and not any(f.pybind_module for f in plan.files):  # importing <name>._C registers the operators
        body = ops_module(plan, _includes(pkg, cpp))
        pkg.names = sorted({name for _, name in operators(plan)})
    elif plan.binds_itself and not cpp:
        pkg.names = sorted({py for f in plan.files for py in f.pybind_defs})
        return  # the .cu file binds itself
    else:  # without .cpp files the module needs torch's pybind11 casters, not torch/extension.h (a quarter of the CPU)
        decls = "" if plan.binds_itself else binding.declarations(codegen.functions_of(plan.exported, cu)) + pybind_module(plan.exported)
        body = (header_sets.pch_text(header_sets.binding_set(decls), False, False) + codegen.CHECK_MACROS if decls and not cpp
                else cpp_prelude + _includes(pkg, cpp)) + (f"\n{decls}" if decls else "")
        pkg.names = sorted({py for f in plan.files for py in f.pybind_defs}) if plan.binds_itself else [fn.name for fn in plan.exported]
    pkg.files[f"csrc/{MODULE_UNIT}"] = (
        f"// {pkg.name}'s C++ unit, generated by `jitlab export` (jitlab.load's main.cpp): torch headers and\n"
        f"// the CHECK_* macros, the snippet's .cpp files, then the Python module.\n" + body)
    pkg.units.append(f"csrc/{MODULE_UNIT}")


def _kernel_units(pkg: Package) -> None:
    """Kernel-only: the user's code and codegen's shims (no torch), plus a torch binding per function."""
    plan = pkg.plan
    cu, cpp = _by_language(plan)
    cpp_prelude, cuda_prelude = codegen.preludes(plan)
    head = ("// {what}, generated by `jitlab export`: the snippet's {ext} files (unchanged, #included), then one\n"
            "// extern \"C\" {shim} per {per} (the shims jitlab.load calls through ctypes); no torch header.\n")
    if cu:
        pkg.files[f"csrc/{CUDA_UNIT}"] = (
            head.format(what=f"{pkg.name}'s CUDA unit", ext=".cu", shim="launcher", per="kernel and host function")
            + cuda_prelude + _includes(pkg, cu) + "\n"
            + shims.shim_unit(codegen.functions_of(plan.exported, cu), cuda=True))
        pkg.units.append(f"csrc/{CUDA_UNIT}")
        _, nvcc = flags.compile_flags(plan, [], flags.Options())
        pkg.nvcc_flags = [f for f in nvcc if f.startswith("-U__CUDA_NO_")]  # CUDA's half/bfloat16 operators back
    if cpp:
        pkg.files[f"csrc/{CPP_UNIT}"] = (
            head.format(what=f"{pkg.name}'s C++ unit", ext=".cpp", shim="wrapper", per="function")
            + cpp_prelude + _includes(pkg, cpp) + "\n"
            + shims.shim_unit(codegen.functions_of(plan.exported, cpp), cuda=False))
        pkg.units.append(f"csrc/{CPP_UNIT}")
    pkg.files[f"csrc/{MODULE_UNIT}"] = kernel_module(plan, pkg.name, pkg.root, _module_doc(pkg))
    pkg.units.append(f"csrc/{MODULE_UNIT}")
    pkg.names = [fn.name for fn in plan.exported]


def _sources(pkg: Package) -> str:
    return ", ".join(_rel(pkg, f.path) for f in pkg.plan.files)


def _module_doc(pkg: Package) -> str:
    return f"{pkg.name}: {_sources(pkg)}, exported by `jitlab export`"


# ---- setup.py, pyproject.toml, __init__.py, README.md --------------------------------------------
def setup_py(pkg: Package) -> str:
    """setup.py: seeds 000/002's package build (CUDAExtension or CppExtension with BuildExtension)."""
    cuda = pkg.plan.cuda
    ext_class = "CUDAExtension" if cuda else "CppExtension"
    extra = ""
    if pkg.nvcc_flags:
        extra = f'            extra_compile_args={{"cxx": [], "nvcc": [{", ".join(repr(f) for f in pkg.nvcc_flags)}]}},\n'
    arch = ("\n# Needs nvcc and a CUDA build of torch of the same CUDA major version; TORCH_CUDA_ARCH_LIST=\"9.0\"\n"
            "# picks the GPU architectures (default: this machine's GPUs).") if cuda else ""
    literal = package_files.literal
    return render("setup.py.tmpl", name=pkg.name, sources=package_files.comment(_sources(pkg)), kind=_kind(pkg.plan),
                  arch=arch,
                  imports=f"BuildExtension, {ext_class}" + (", CUDA_HOME" if cuda else ""),
                  cuda_check=render("setup_cuda_check.py.tmpl", name=pkg.name) if cuda else "",
                  ext_class=ext_class, extension=pkg.extension, units=", ".join(map(literal, pkg.units)),
                  include_dirs=", ".join(f"os.path.join(HERE, {literal(d)})" for d in pkg.include_dirs), extra=extra)


def init_py(pkg: Package) -> str:
    """The package's ``__init__.py``: torch first (the extension links against its libraries), then the
    extension; an operator snippet's operators as attributes too (``pkg.scale`` is ``torch.ops.myops.scale``)."""
    names = f"\n__all__ = {pkg.names!r}\n" if pkg.names else ""
    doc = package_files.docstring(f"{_module_doc(pkg)}.\n\n{_usage(pkg)}\n")
    ops = "".join(f"{name} = torch.ops.{ns}.{name}\n" for ns, name in operators(pkg.plan))
    return (f"{doc}\n\n"
            "import torch  # noqa: F401  (first: the compiled extension links against torch's libraries)\n\n"
            f"from .{pkg.extension} import *  # noqa: F401,F403\n"
            + (f"\n# Importing the extension registered these operators:\n{ops}" if ops else "") + names)


def _usage(pkg: Package) -> str:
    """Example calls, one per function."""
    lines = [f"import torch, {pkg.name}"]
    cu, _ = _by_language(pkg.plan)
    cuda_fns = {fn.name for fn in codegen.functions_of(pkg.plan.exported, cu)}
    if pkg.plan.kind == "kernel":
        where = "CUDA tensors" if cuda_fns else "CPU tensors"
        lines.append(f"# {where} for pointer parameters (help() says which dtype), Python numbers for scalars")
        for fn in pkg.plan.exported:
            args = [py_name(p, i) for i, p in enumerate(fn.params)]
            if fn.kind == "global":
                args += ["grid=...", "block=256"]
            lines.append(f"{pkg.name}.{fn.name}({', '.join(args)})")
    elif operators(pkg.plan):
        lines += [f"{pkg.name}.{name}(...)  # or torch.ops.{ns}.{name}(...)" for ns, name in operators(pkg.plan)]
    else:
        for fn in pkg.plan.exported:
            lines.append(f"{pkg.name}.{fn.name}({', '.join(p.name for p in fn.params)})")
        if not pkg.plan.exported:
            lines += [f"{pkg.name}.{n}(...)" for n in pkg.names]
    return "\n".join("    " + line for line in lines)


def _kind(plan: KernelPlan | TorchPlan) -> str:
    return "kernel-only" if plan.kind == "kernel" else "torch-style"


def readme(pkg: Package) -> str:
    """README.md: what the package is, how to build and install it, how to call it, and its files."""
    plan = pkg.plan
    kind = ("a kernel-only snippet: tensors go in for pointer parameters, numbers for scalars"
            if plan.kind == "kernel" else "a torch-style snippet: host functions taking torch::Tensor")
    skipped = ""
    if plan.kind == "kernel" and plan.skipped:
        skipped = "## Not exported\n\n" + "".join(f"- `{n}`: {why}\n" for n, why in plan.skipped)
    cuda = ("Needs nvcc of the CUDA major version torch was built with. `TORCH_CUDA_ARCH_LIST=\"9.0\"` picks\n"
            "the GPU architectures (default: the GPUs of the building machine).\n" if plan.cuda else "")
    kernels = ("; kernels take `grid=`, `block=`, `shared_mem=0`, `stream=None`\nand launch on torch's current stream"
               if any(fn.kind == "global" for fn in plan.exported) else "")
    return render("README.md.tmpl", name=pkg.name, sources=", ".join(f"`{_rel(pkg, f.path)}`" for f in plan.files),
                  kind=kind, ext_class="CUDAExtension" if plan.cuda else "CppExtension", cuda=cuda, kernels=kernels,
                  usage="\n".join(line[4:] for line in _usage(pkg).splitlines()), skipped=skipped,
                  extension=pkg.extension, units="\n".join(f"  - `{u}`" for u in pkg.units))
