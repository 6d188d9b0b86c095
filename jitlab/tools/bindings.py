"""The C++ Python modules of an exported package: ``jitlab export``'s bindings, and the templates' filler.

A kernel-only snippet compiles without torch, so its package gets one torch binding per exported
function (:func:`kernel_module`): tensors in for pointer parameters and Python numbers for scalars,
each checked (dtype, device, contiguity, written leaf, integer range) with :mod:`jitlab.jit.messages`'
texts, the ones jitlab.load's own wrappers raise; then a call of :mod:`jitlab.jit.shims`' ``extern "C"``
shim on torch's current stream, its error code turned into an exception. A torch-style snippet gets
the ``PYBIND11_MODULE`` load_inline's ``functions=`` writes (:func:`pybind_module`), an operator snippet
an empty one whose import registers its operators (:func:`ops_module`). The fixed C++ is
in ``templates/``, filled by :func:`render`, which :mod:`jitlab.tools.export` uses for its files too.
"""

from __future__ import annotations

import ctypes
import keyword
import re
import string
import textwrap
from importlib import resources
from pathlib import Path

import torch

from jitlab.jit import codegen, ctypes_map, messages, shims
from jitlab.jit.launch import py_name
from jitlab.jit.parse import Function, Param
from jitlab.jit.plan import KernelPlan, TorchPlan
from jitlab.jit.pyargs import pyargs

# Tensor dtype → c10::ScalarType enumerator, for the dtype check of a pointer parameter.
SCALAR_TYPES = {
    torch.float32: "Float", torch.float64: "Double", torch.float16: "Half", torch.bfloat16: "BFloat16",
    torch.bool: "Bool", torch.int8: "Char", torch.uint8: "Byte", torch.int16: "Short", torch.uint16: "UInt16",
    torch.int32: "Int", torch.uint32: "UInt32", torch.int64: "Long", torch.uint64: "UInt64",
}
# ctypes integer → the fixed-width C++ type its range check uses.
INT_TYPES = {
    ctypes.c_int8: "int8_t", ctypes.c_uint8: "uint8_t", ctypes.c_int16: "int16_t", ctypes.c_uint16: "uint16_t",
    ctypes.c_int32: "int32_t", ctypes.c_uint32: "uint32_t", ctypes.c_int64: "int64_t", ctypes.c_uint64: "uint64_t",
}


def render(template: str, /, **fields: str) -> str:
    """The file ``template`` of templates/ with its ``$fields`` filled (:class:`string.Template`). A field
    first on its line has its value's later lines indented as far; an empty one alone on its line goes."""
    text = (resources.files("jitlab.tools") / "templates" / template).read_text()
    for key, value in fields.items():
        first = re.search(rf"^( *)\${{?{key}\b", text, re.M)
        if first and value:
            fields[key] = re.sub(r"\n(?=.)", "\n" + first[1], value)
        elif first:
            text = re.sub(rf"^ *\${{?{key}}}?\n", "", text, flags=re.M)
    return string.Template(text).substitute(fields)


def pybind_module(fns: list[Function]) -> str:
    """``PYBIND11_MODULE`` with one ``m.def`` per function, as load_inline's ``functions=`` writes it.

    Each function goes through ``torch::wrap_pybind_function`` (torch's errors become Python errors);
    its docstring is its C++ signature; its parameters are named, with their literal defaults
    (:mod:`jitlab.jit.pyargs`).
    """
    defs = "".join(f'  m.def("{fn.name}", torch::wrap_pybind_function({fn.name}), {_c_str(_signature(fn))}'
                   f'{pyargs(fn)});\n' for fn in fns)
    return "\nPYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {\n" + defs + "}\n"


def operators(plan: KernelPlan | TorchPlan) -> list[tuple[str, str]]:
    """``(namespace, name)`` of each operator an operator snippet registers, once, where both are
    identifiers (they are pasted into the package's ``__init__.py`` as code); none for a kernel-only plan."""
    found = dict.fromkeys((op.namespace, op.name) for op in (plan.ops if isinstance(plan, TorchPlan) else []))
    return [(ns, name) for ns, name in found if ns.isidentifier() and name.isidentifier() and not keyword.iskeyword(name)]


def ops_module(plan: TorchPlan, cpp_includes: str) -> str:
    """An operator snippet's C++ module unit: what ``jitlab.load`` compiles its ``.cpp`` files on (torch's
    types, ``torch/library.h`` and the CHECK_* macros, not all of ``torch/extension.h``), then a module
    with nothing in it: importing it loads the library, whose ``TORCH_LIBRARY`` blocks register the
    operators (PyTorch's own extension example does the same)."""
    namespaces = ", ".join(sorted({f"torch.ops.{ns}" for ns, _ in operators(plan)})) or "its operators"
    return ("#include <Python.h>\n#include <torch/types.h>\n#include <torch/library.h>\n" + codegen.CHECK_MACROS
            + cpp_includes + f"\n// Nothing to bind: importing the module registers {namespaces}.\n"
            "static struct PyModuleDef jitlab_module = {PyModuleDef_HEAD_INIT, \"_C\", nullptr, -1, nullptr};\n"
            "PyMODINIT_FUNC PyInit__C(void) { return PyModule_Create(&jitlab_module); }\n")


def kernel_module(plan: KernelPlan, name: str, root: Path, doc: str) -> str:
    """The C++ module of a kernel-only snippet: one checked torch wrapper per shim, and PYBIND11_MODULE.

    Args:
        plan: codegen's kernel-only plan.
        name: The package's name.
        root: The folder the user's files are named relative to (in each wrapper's docstring).
        doc: The module's docstring.
    """
    cu = [f for f in plan.files if f.language == "cuda"]
    cuda_fns = {fn.name for fn in codegen.functions_of(plan.exported, cu)}
    protos = [(shims.launch_prototype(fn) if fn.kind == "global" else shims.call_prototype(fn)) + ";"
              for fn in plan.exported]
    if cu:
        protos = ['extern "C" const char* jitlab_error_name(int e);', 'extern "C" const char* jitlab_error_string(int e);',
                  'extern "C" const char* jitlab_last_exception();'] + protos
    if len(cuda_fns) < len(plan.exported):
        protos.insert(0, 'extern "C" const char* jitlab_cpp_last_exception();')
    devices = {fn.name: "cuda" if fn.name in cuda_fns else "cpu" for fn in plan.exported}
    checks = check_messages()
    return render("kernel_module.cpp", name=name, prototypes="\n".join(protos),
                  dtype_cases="\n".join(f'case c10::ScalarType::{st}: return "{_dtype(dt)}";'
                                        for dt, st in SCALAR_TYPES.items()),
                  device_helpers=render("cuda_helpers.h" if cu else "cpp_helpers.h", **checks),
                  wrappers="\n".join(_wrapper(fn, devices[fn.name], root) for fn in plan.exported),
                  doc=_c_str(doc), defs="".join(_def(fn, devices[fn.name], root) for fn in plan.exported),
                  **checks)


def check_messages() -> dict[str, str]:
    """The message arguments of the checks in templates/: jit.messages' texts (the ones jitlab.load's
    wrappers raise) with C++ expressions for their fields; numbers go through std::to_string."""
    m, limit = messages, "std::to_string((int64_t)std::numeric_limits<T>::{}())"

    def runtime_api(errors):  # the shims return the runtime API's errors (cudaError_t)
        return " || ".join(f'name == "{e}"' for e in errors if e.startswith("cudaError"))

    return {
        "not_a_tensor": _cxx(m.NOT_A_TENSOR.replace("{got}", "None")),
        "dtype": _cxx(m.DTYPE, want="dtype_name(dtype)", got="dtype_name(t.scalar_type())"),
        "not_cuda": _cxx(m.NOT_CUDA, device="t.device()"),
        "not_cpu": _cxx(m.NOT_CPU, device="t.device()"),
        "not_contiguous": _cxx(m.NOT_CONTIGUOUS, strides="strides_of(t)"),
        "written_leaf": _cxx(m.WRITTEN_LEAF),
        "lazy_view": _cxx(m.LAZY_VIEW, kind='(t.is_conj() ? "conj" : "neg")'),
        "other_device": _cxx(m.OTHER_DEVICE, device="t.device()", first="device"),
        "int_range": _cxx(m.INT_RANGE, lo=limit.format("min"), hi=limit.format("max"), value="std::to_string(v)"),
        "no_config": _cxx(m.NO_CONFIG),
        "bad_dims": _cxx(m.BAD_DIMS, what="what", value="std::string(py::repr(v))"),
        "shared_mem": _cxx(m.SHARED_MEM, value="std::to_string(v)"),
        "host_exception": _cxx(m.HOST_EXCEPTION, what="last_exception()"),
        "host_cuda_error": _cxx(m.HOST_CUDA_ERROR, error="jitlab_error_name(err)", text="jitlab_error_string(err)"),
        "launch_failed": _cxx(m.LAUNCH_FAILED, grid="dims_text(g)", block="dims_text(b)", error="name",
                              shared_mem="std::to_string(smem)", text="jitlab_error_string(err)", hint="hint"),
        "config_errors": runtime_api(m.CONFIG_ERRORS), "sticky_errors": runtime_api(m.STICKY_ERRORS),
        "config_hint": "\n".join(map(_c_str, _lines(m.CONFIG_HINT))),
        "sticky_hint": "\n".join(map(_c_str, _lines(m.STICKY_HINT))),
    }


#: The C++ expressions of an argument's fields in jit.messages (``fn``, ``i``, ``name``, ``ctype``) in the checks.
ARG = {"fn": "fn", "i": "std::to_string(i)", "name": "name", "ctype": "ctype"}


def _cxx(template: str, **fields: str) -> str:
    """A jit.messages text as TORCH_CHECK's message arguments: its text as C++ string literals between the
    C++ expressions of its fields (``fields``, else :data:`ARG`), in lines of about 90 characters."""
    pieces = []
    for text, name, _, _ in string.Formatter().parse(template):
        pieces += [_c_str(line) for line in _lines(text)] + ([{**ARG, **fields}[name]] if name else [])
    lines = [""]
    for piece in pieces:
        if lines[-1] and len(lines[-1]) + len(piece) > 90:
            lines.append("")
        lines[-1] += piece + ", "
    return "\n".join(line.rstrip() for line in lines)[:-1]


def _lines(text: str) -> list[str]:
    """``text`` cut at spaces into pieces of at most 80 characters (every character kept)."""
    return textwrap.wrap(text, 80, drop_whitespace=False, break_on_hyphens=False)


def _param_types(p: Param) -> tuple[str, str]:
    """A scalar parameter's C++ type in the wrapper (what pybind converts a Python number to) and its kind."""
    ctype, kind = ctypes_map.scalar_kind(p)
    if kind == "int":
        return ("uint64_t" if ctype is ctypes.c_uint64 else "int64_t"), kind
    if kind == "bool":
        return "bool", kind
    return "double", kind


def _wrapper(fn: Function, device: str, root: Path) -> str:
    """One wrapper: check every argument, then call the shim and turn its error code into an exception."""
    params, checks, passed, tensors = [], [], [], []
    dev_type = "c10::DeviceType::CUDA" if device == "cuda" else "c10::DeviceType::CPU"
    for i, p in enumerate(fn.params):
        a, name, ctype = f"a{i}", py_name(p, i), _c_str(p.ctype)
        if p.pointer:
            dt = ctypes_map.pointer_dtype(p)
            params.append(f"const at::Tensor& {a}")
            scalar_type = SCALAR_TYPES[dt] if dt else "Byte"  # void*: any dtype, this one unused
            checks.append(f'check_tensor({a}, fn, {i + 1}, "{name}", {ctype}, {str(dt is None).lower()}, '
                          f'c10::ScalarType::{scalar_type}, {dev_type}, {str(not p.const).lower()});')
            if device == "cuda":
                checks.append(f'check_same_device({a}, device, fn, {i + 1}, "{name}", {ctype});' if tensors
                              else f"const c10::Device device = {a}.device();")
            tensors.append(a)
            passed.append(f"{a}.data_ptr()")
            continue
        cxx, kind = _param_types(p)
        params.append(f"{cxx} {a}")
        checked = INT_TYPES.get(ctypes_map.scalar_kind(p)[0])
        if kind == "int" and checked not in ("int64_t", "uint64_t"):  # a narrower int: range-checked
            passed.append(f'checked_int<{checked}>({a}, fn, {i + 1}, "{name}", {ctype})')
        elif kind in ("half", "bfloat16"):
            passed.append(f"c10::{'Half' if kind == 'half' else 'BFloat16'}(static_cast<float>({a})).x")
        else:
            passed.append(a)
    signature = _located(fn, root)
    if fn.kind == "global":
        if not tensors:
            checks.append("const c10::Device device = current_cuda_device();")
        return render("kernel_wrapper.cpp", signature=signature, fn=fn.name, params="".join(f"{p}, " for p in params),
                      checks="\n".join(checks), args="".join(f", {a}" for a in passed))
    returns = fn.returns.strip()
    ret_type = "void" if returns == "void" else _param_types(Param(name="ret", text=returns, base=returns))[0]
    if device == "cuda" and tensors:
        checks.append("const c10::DeviceGuard guard(device);")
    if returns != "void":
        checks.append(f"{returns} ret{{}};")
        passed.insert(0, "&ret")
    return render("host_wrapper.cpp", signature=signature, returns=ret_type, fn=fn.name, params=", ".join(params),
                  checks="\n".join(checks), args=", ".join(passed),
                  last_exception="jitlab_last_exception" if device == "cuda" else "jitlab_cpp_last_exception",
                  ret="" if returns == "void" else f"return ({ret_type})ret;")


def _def(fn: Function, device: str, root: Path) -> str:
    """The ``m.def`` of one wrapper: Python argument names, keyword-only launch configuration, docstring."""
    args = [f'py::arg("{py_name(p, i)}")' for i, p in enumerate(fn.params)]
    if fn.kind == "global":
        args += ["py::kw_only()", 'py::arg("grid") = py::none()', 'py::arg("block") = py::none()',
                 'py::arg("shared_mem") = 0', 'py::arg("stream") = py::none()']
    return (f'  m.def("{fn.name}", torch::wrap_pybind_function({fn.name}_py), {_c_str(describe(fn, device, root))},\n'
            f"        {', '.join(args)});\n")


def describe(fn: Function, device: str, root: Path) -> str:
    """What each argument must be, then the C signature and where it is (jitlab's ``help(k.f)`` text)."""
    parts = []
    for i, p in enumerate(fn.params):
        if p.pointer:
            dt = ctypes_map.pointer_dtype(p)
            parts.append(f"{py_name(p, i)}: Tensor[{_dtype(dt) if dt else 'any'}, {device}, "
                         f"{'in' if p.const else 'out'}]")
        else:
            parts.append(f"{py_name(p, i)}: {ctypes_map.scalar_kind(p)[1]}")
    if fn.kind == "global":
        parts.append("*, grid, block, shared_mem=0, stream=None")
    ret = "" if fn.returns.strip() == "void" else f" -> {fn.returns.strip()}"
    return f"{fn.name}({', '.join(parts)}){ret}\n\n{_located(fn, root)}"


def _signature(fn: Function) -> str:
    """The C++ signature on one line (parameter lists written over several lines are joined)."""
    return " ".join(fn.signature().split())


def _located(fn: Function, root: Path) -> str:
    """The one-line C++ signature and where it is, the user's file relative to ``root``: ``... [k.cu:3]``."""
    return f"{_signature(fn)}  [{Path(fn.path).relative_to(root).as_posix()}:{fn.line}]"


def _dtype(dt: torch.dtype) -> str:
    return str(dt).removeprefix("torch.")


def _c_str(text: str) -> str:
    """A C++ string literal of ``text``."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
