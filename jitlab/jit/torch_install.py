"""What torch's install says about building against it, read from its files without importing torch.

``import torch`` takes 3-4 s (3.5 s on the lent H200, 3 s on 2 cores); a build's flags and cache keys need
only its version, its CUDA version, its C++ ABI and its include folders. Reading them from the files lets
``jitlab check`` start torch's precompiled headers, the batch's longest step, before torch is imported
(:func:`jitlab.jit.prepare.ahead`), with the same cache entry a build after the import asks for: every
caller reads these, never ``torch.version`` or ``torch._C`` (a test holds each equal to torch's own answer).
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import sys
from pathlib import Path

from jitlab.errors import ToolchainError

#: A mangled name only a library built with ``_GLIBCXX_USE_CXX11_ABI=1`` holds (``std::__cxx11::basic_string``).
_CXX11_MANGLED = b"St7__cxx11"


def root() -> Path:
    """torch's package folder (the one ``import torch`` loads, or has loaded)."""
    return _root(sys.modules["torch"].__file__ if "torch" in sys.modules else None)


@functools.cache
def _root(loaded: str | None) -> Path:
    if loaded:
        return Path(loaded).parent
    spec = importlib.util.find_spec("torch")  # finds the package; runs nothing of it
    if spec is None or not spec.submodule_search_locations:
        raise ToolchainError("torch is not installed in this Python: `pip install torch` (or the project's "
                             "environment: `make demo` sets it up)")
    return Path(next(iter(spec.submodule_search_locations)))


def init_file() -> str:
    """``torch.__file__``."""
    return str(root() / "__init__.py")


def version() -> str:
    """``torch.__version__``."""
    return _version_file(root())["__version__"]


def cuda_version() -> str | None:
    """``torch.version.cuda``: the CUDA torch was built with, ``None`` for a CPU build."""
    return _version_file(root()).get("cuda")


@functools.cache
def _version_file(folder: Path) -> dict:
    """The constants ``torch/version.py`` assigns (a generated file of literals)."""
    out = {}
    for node in ast.parse((folder / "version.py").read_text()).body:
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        if isinstance(target, ast.Name) and getattr(node, "value", None) is not None:
            try:
                out[target.id] = ast.literal_eval(node.value)
            except ValueError:
                pass
    return out


def cxx11_abi() -> bool:
    """``torch._C._GLIBCXX_USE_CXX11_ABI``: whether torch's C++ libraries use the C++11 ``std::string``,
    which every host unit must match (``-D_GLIBCXX_USE_CXX11_ABI=``); read from ``libc10.so``'s names."""
    return _cxx11_abi(root() / "lib" / "libc10.so")


@functools.cache
def _cxx11_abi(lib: Path) -> bool:
    try:
        return _CXX11_MANGLED in lib.read_bytes()
    except OSError:  # an unusual layout: ask torch itself
        import torch

        return bool(torch._C._GLIBCXX_USE_CXX11_ABI)


def include_paths() -> list[str]:
    """torch's include folders, as ``torch.utils.cpp_extension.include_paths("cpu")`` gives them."""
    inc = root() / "include"
    return [str(inc), str(inc / "torch" / "csrc" / "api" / "include")]


def lib_dir() -> Path:
    """The folder of torch's C++ libraries (``-L``)."""
    return root() / "lib"
