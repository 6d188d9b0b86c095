"""Which precompiled torch header set each host unit starts on: the sets, what each holds, and the choice.

A plan-stage choice (:mod:`jitlab.jit.codegen` and :mod:`jitlab.jit.module_unit` record it in each
:class:`~jitlab.jit.plan.Unit`); the object engine (:mod:`jitlab.jit.engines.pch`) makes the sets and
moves a unit that fails on a smaller one to a larger one. The sets, smallest first:

- ``host``: ``torch/types.h`` (tensors, ATen ops, factories, ``TORCH_CHECK``, ``AT_DISPATCH``) and, for
  CUDA snippets with a CUDA build of torch, the CUDA runtime and torch's CUDA context and guard headers:
  host functions, of ``.cu`` and ``.cpp`` files;
- ``casters``: torch's pybind11 casters and ``wrap_pybind_function``, without ``torch/types.h``'s ATen
  functions: binding units;
- ``bind``: ``torch/types.h`` and torch's pybind11 casters: a C++ file holding its own module (or naming
  pybind11 or Python's C API), and binding units that name more than ``casters`` declares;
- ``full``: ``torch/extension.h``, what ``load_inline`` gives: everything else.
"""

from __future__ import annotations

import re

# The header sets, smallest first. With GCC 12 on 2 cores, an empty unit on ``host`` costs 1.75 CPU-s and on
# ``casters`` 2.1 (``-O0``; docs/benchmarks.md, "make test toward five minutes, part 3"); making ``host`` takes
# ~17 CPU-s, ``full`` ~35.
HEADERS = ("host", "casters", "bind", "full")
#: Where a unit that failed on a set may go, in order. A C++ snippet's ``host`` unit may also go to ``bind``
#: (:func:`larger`); a CUDA snippet's not: ``bind`` lacks a CUDA torch's headers.
LARGER = {"host": ("full",), "casters": ("bind", "full"), "bind": ("full",), "full": ()}
#: The sets without CUDA headers: one set for C++ and CUDA snippets.
NO_CUDA = ("casters", "bind")


def larger(small: str, cuda: bool) -> tuple[str, ...]:
    """The sets a unit that failed on ``small`` may go to, in order (:data:`LARGER`)."""
    return ("bind", "full") if small == "host" and not cuda else LARGER[small]


_TORCH_UMBRELLAS = re.compile(r'^[ \t]*#[ \t]*include[ \t]*[<"]torch/(?:extension|all|torch|python)\.h[>"][^\n]*$',
                               re.MULTILINE)


def pch_text(headers: str, cuda: bool, cuda_torch: bool) -> str:
    """What a header set holds.

    ``host`` and ``full`` add, for CUDA snippets with a CUDA build of torch, the CUDA runtime and torch's
    CUDA context and guard headers (what torch-style CUDA host code includes); ``casters`` and ``bind`` are
    the same for every snippet. With a CPU build of torch a CUDA snippet's sets are the C++ ones: the CUDA
    runtime alone costs a unit ~0.03 s to parse, far less than a second set (~20 s to make, ~40 s for
    ``full``), so its units include it after the set (:func:`after_set`).
    """
    if headers not in HEADERS:
        raise ValueError(f"unknown header set {headers!r}: one of {', '.join(HEADERS)}")
    if headers == "casters":  # torch::Tensor and the rest of at:: as torch/types.h names them
        return ("#include <torch/csrc/utils/pybind.h>\n#include <torch/csrc/Exceptions.h>\n"
                "namespace torch {\nusing namespace at;\n}\n")
    if headers == "bind":
        return ("#include <torch/types.h>\n#include <torch/csrc/utils/pybind.h>\n"
                "#include <torch/csrc/Exceptions.h>\n")
    # C++'s <math.h> puts the float overloads of the math functions (exp, abs, ...) in the global namespace, as
    # torch/extension.h's Python headers do: unqualified exp(x) on a float is the same function on every set.
    text = "#include <torch/extension.h>\n" if headers == "full" else "#include <torch/types.h>\n#include <math.h>\n"
    if cuda and cuda_torch:
        text += "#include <cuda_runtime.h>\n#include <ATen/cuda/CUDAContext.h>\n#include <c10/cuda/CUDAGuard.h>\n"
    return text


def after_set(headers: str, cuda: bool, cuda_torch: bool) -> tuple[str, ...]:
    """The headers a CUDA snippet's host unit includes right after its set, so that every host unit of a CUDA
    snippet sees torch's headers, then the CUDA runtime: the CUDA runtime where its set lacks it (a CPU build of
    torch, :func:`pch_text`)."""
    return ("cuda_runtime.h",) if cuda and not cuda_torch and headers not in NO_CUDA else ()


# What a binding unit may name of torch and still compile on `casters`: the types its casters convert,
# and the wrapper jitlab's binding unit puts around each function.
_CASTER_TYPES = {"Tensor", "TensorOptions", "ScalarType", "IntArrayRef", "Scalar", "Device", "wrap_pybind_function"}
_TORCH_NAME = re.compile(r"\b(?:torch|at)::(\w+)|\bAT_DISPATCH_\w+")


def binding_set(text: str, bodies: bool = False) -> str:
    """The set a binding unit starts on: ``casters``, unless its code (after the first ``#line``: jitlab's
    prelude names nothing of torch) names torch beyond the types pybind11 converts (``torch::empty``,
    ``torch::kFloat32``, an ``AT_DISPATCH`` macro), which ``bind`` declares; ``bind`` too for a unit that
    also holds host functions' bodies (``bodies``: a C++ snippet's file with its own module). A wrong guess
    only costs time: a unit that fails on ``casters`` goes to ``bind`` (:func:`larger_set`)."""
    user = text[max(text.find("#line "), 0):]
    if bodies or any(m.group(1) not in _CASTER_TYPES for m in _TORCH_NAME.finditer(user)):
        return "bind"
    return "casters"


# What only pybind11's and Python's headers declare (``bind`` has them, ``host`` does not).
_PYTHON_NAME = re.compile(r"\b(?:py|pybind11)::|\bpybind11\b|\bPYBIND11_\w+|\bPy[A-Z]\w*|\b_?Py_\w+|\bTHP\w*|"
                          r"\btorch::python\b")


def host_set(texts) -> str:
    """The set a C++ file's host unit starts on when it holds no module of its own: ``host``, as a CUDA
    file's host functions, unless its text or a local header's (``texts``) names pybind11 or Python's C
    API (``py::object``, ``PyObject``, ``THPVariable_Wrap``), which ``bind`` declares. A wrong guess only
    costs time: a unit that fails on ``host`` on a name ``full`` declares goes there (:func:`larger_set`)."""
    return "bind" if any(_PYTHON_NAME.search(t) for t in texts) else "host"


def includes_umbrella(text: str) -> bool:
    """Whether ``text`` includes ``torch/extension.h`` (or ``all.h``, ``torch.h``, ``python.h``): a local
    header that does pulls all of torch into any unit, so the unit is built on ``full``."""
    return _TORCH_UMBRELLAS.search(text) is not None


def without_umbrellas(text: str) -> str:
    """``text`` with its umbrella includes blanked: on a smaller set they would parse all of torch."""
    return _TORCH_UMBRELLAS.sub("", text)
