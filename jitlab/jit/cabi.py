"""C-ABI entries: how a torch-style snippet's functions reach Python without a binding unit of their own.

pybind11 costs every unit that includes it ~2 CPU-s whatever the unit binds (docs/benchmarks.md, "what each
header set costs a unit"), so a snippet's generated ``PYBIND11_MODULE`` unit was a second compile as long as
its host code's. Instead, each host unit ends with one entry per function it defines and exports::

    extern "C" void jitlab_entry_scale(void** args, void* result) {
      new (result) at::Tensor(::scale(*static_cast<at::Tensor*>(args[0]), *static_cast<double*>(args[1])));
    }

and one library built once per toolchain (:mod:`jitlab.jit.engines.binder`) converts Python's arguments with
torch's own pybind11 casters, as the pybind11 binding would, into values of the types below, calls the
entry and converts its result. The entry calls the function by name, so C++ checks every argument: a type
read here differently from the declaration is converted as C++ converts it, never misread.

A function whose signature names a type not below (a tuple, ``at::Scalar``, a non-const reference to a
number) keeps the generated pybind11 unit (:func:`supported` says why not).
"""

from __future__ import annotations

import ast
import keyword
import re
from dataclasses import dataclass

from jitlab.jit.parse import Function, Param
from jitlab.jit.pyargs import defaults


@dataclass(frozen=True)
class CType:
    """A type an entry's argument or result may have.

    Attributes:
        cxx: The C++ type the binder holds the value as (the entry reads or constructs it).
        python: The annotation pybind11 prints for it, as a Python expression.
        spellings: How a declaration may spell it, after :func:`canonical`.
        result: Whether a function may return it (an ``IntArrayRef`` would point into a freed vector).
    """

    cxx: str
    python: str
    spellings: tuple[str, ...]
    result: bool = True


#: The types, in the order of their codes (the binder's switch, :func:`types_macro`).
TYPES = (
    CType("at::Tensor", "torch.Tensor", ("Tensor",)),
    CType("int64_t", "int", ("int64_t", "long", "long int", "signed long", "longint")),
    CType("int", "int", ("int", "signed", "signed int", "int32_t")),
    CType("double", "float", ("double",)),
    CType("float", "float", ("float",)),
    CType("bool", "bool", ("bool",)),
    CType("std::string", "str", ("string",)),
    CType("std::vector<int64_t>", "list[int]", ("vector<int64_t>", "vector<long>")),
    CType("std::vector<at::Tensor>", "list[torch.Tensor]", ("vector<Tensor>",)),
    CType("std::optional<at::Tensor>", "torch.Tensor | None", ("optional<Tensor>",)),
    CType("long long", "int", ("long long", "long long int")),
    CType("unsigned int", "int", ("unsigned", "unsigned int", "uint32_t")),
    CType("unsigned long", "int", ("unsigned long", "size_t", "uint64_t")),
    CType("std::vector<int>", "list[int]", ("vector<int>",)),
    CType("std::vector<double>", "list[float]", ("vector<double>",)),
    CType("std::vector<float>", "list[float]", ("vector<float>",)),
    CType("std::optional<double>", "float | None", ("optional<double>",)),
    CType("std::optional<int64_t>", "int | None", ("optional<int64_t>", "optional<long>")),
    CType("c10::IntArrayRef", "list[int]", ("IntArrayRef", "ArrayRef<int64_t>"), result=False),
)
_CODES = {s: i for i, t in enumerate(TYPES) for s in t.spellings}
#: The result code of a function returning ``void``.
VOID = -1
_NAMESPACES = re.compile(r"(?<![\w:])(?:::)?(?:std|at|c10|torch)::")


def canonical(spelled: str) -> str:
    """A type as written, without qualifiers, references, spaces or torch's and the standard library's
    namespaces: ``const torch::Tensor&`` → ``Tensor``, ``c10::optional<at::Tensor>`` → ``optional<Tensor>``."""
    t = re.sub(r"\b(?:const|volatile)\b|&", " ", spelled)
    t = re.sub(r"\s*([<>,:*])\s*", r"\1", re.sub(r"\s+", " ", t)).strip()
    return _NAMESPACES.sub("", t)


def param_code(p: Param) -> int | None:
    """The code of a parameter's type, or ``None``: a pointer, a function, an rvalue reference or a reference
    to something other than a tensor that is not ``const`` (the function could write to it) has none."""
    if p.pointer or p.function or "&&" in p.text:
        return None
    code = _CODES.get(canonical(p.base))
    if code is None or (p.reference and not p.const and TYPES[code].cxx != "at::Tensor"):
        return None
    return code


def result_code(fn: Function) -> int | None:
    """The code of what ``fn`` returns (:data:`VOID` for ``void``), or ``None`` when no entry can return it."""
    spelled = canonical(fn.returns)
    if spelled == "void":
        return VOID
    code = _CODES.get(spelled)
    return code if code is not None and TYPES[code].result and "*" not in spelled else None


def supported(fn: Function) -> bool:
    """Whether ``fn`` can be called through an entry: every parameter's type and its result have codes."""
    return (len(fn.params) <= MAX_PARAMS and result_code(fn) is not None
            and all(param_code(p) is not None for p in fn.params))


#: The most parameters an entry takes (the binder's room for arguments).
MAX_PARAMS = 16


def entry_name(fn: Function) -> str:
    """The entry's symbol: ``jitlab_entry_<name>``."""
    return f"jitlab_entry_{fn.name}"


def entries(fns: list[Function]) -> str:
    """The C++ entries of ``fns``, to end the unit that defines them (each under its function's ``#if``)."""
    out = ["#include <new>\n"]
    for fn in fns:
        args = ", ".join(f"*static_cast<{TYPES[param_code(p)].cxx}*>(args[{i}])" for i, p in enumerate(fn.params))
        call = f"::{fn.name}({args})"  # qualified: no argument-dependent lookup (at::add)
        code = result_code(fn)
        body = f"{call};" if code == VOID else f"new (result) {TYPES[code].cxx}({call});"
        entry = (f'extern "C" __attribute__((visibility("default"))) void {entry_name(fn)}(void** args, void* result) '
                 f"{{\n  (void)args; (void)result;\n  {body}\n}}\n")
        out.append(f"#if {fn.guard}\n{entry}#endif\n" if fn.guard else entry)
    return "".join(out)


def types_macro() -> str:
    """``#define JITLAB_TYPES(X) X(0, at::Tensor) ...``: the codes for the binder's source."""
    return "#define JITLAB_TYPES(X) " + " ".join(f"X({i}, {t.cxx})" for i, t in enumerate(TYPES)) + "\n"


def signature(fn: Function) -> str:
    """The signature pybind11 prints for ``fn``: ``(x: torch.Tensor, alpha: float = 2.0) -> torch.Tensor``."""
    values = python_defaults(fn)
    params = [f"{p.name}: {TYPES[param_code(p)].python}" + (f" = {values[i]!r}" if i in values else "")
              for i, p in enumerate(fn.params)]
    code = result_code(fn)
    return f"({', '.join(params)}) -> {'None' if code == VOID else TYPES[code].python}"


def python_defaults(fn: Function) -> dict[int, object]:
    """Parameter index → its Python default, for the literal defaults Python can give (:func:`pyargs.defaults`)."""
    out: dict[int, object] = {}
    for i, (p, literal) in enumerate(zip(fn.params, defaults(fn))):
        value = _value(literal, TYPES[param_code(p)].python) if literal is not None else _NONE
        if value is _NONE:
            out.clear()  # a default Python cannot give makes the ones before it required too
        else:
            out[i] = value
    return out


_NONE = object()


def _value(literal: str, python: str) -> object:
    """A C++ literal default as the Python value of the parameter's type, or ``_NONE`` when it cannot be one."""
    text = literal.strip()
    if text == "pybind11::none()":
        return None if python.endswith("| None") else _NONE
    if text in ("true", "false"):
        value: object = text == "true"
    elif text.startswith('"'):
        try:
            value = ast.literal_eval(text)
        except (SyntaxError, ValueError):
            return _NONE
    elif text.startswith("'"):
        try:
            value = ord(ast.literal_eval(text))
        except (SyntaxError, ValueError, TypeError):
            return _NONE
    else:
        value = _number(text)
        if value is _NONE:
            return _NONE
    kind = python.split(" |")[0]
    if kind == "str":
        return value if isinstance(value, str) else _NONE
    if isinstance(value, str) or kind not in ("int", "float", "bool"):
        return _NONE
    return {"int": int, "float": float, "bool": bool}[kind](value)


def _number(text: str) -> object:
    t = text.replace("'", "")
    sign = -1 if t.startswith("-") else 1
    t = t.lstrip("+-")
    if re.fullmatch(r"0[xX][0-9a-fA-F]+[uUlL]*", t):
        return sign * int(t.rstrip("uUlL"), 16)
    if re.fullmatch(r"0[0-7]+[uUlL]*", t):
        return sign * int(t.rstrip("uUlL"), 8)
    if re.fullmatch(r"[0-9]+[uUlL]*", t):
        return sign * int(t.rstrip("uUlL"))
    try:
        return sign * float(t.rstrip("fFlL"))
    except ValueError:
        return _NONE


def python_source(fn: Function) -> tuple[str, dict[str, object]]:
    """The text of ``fn``'s Python function over its entry (``_entry``), and the defaults it names.

    ``def _function(x: torch.Tensor, alpha: float = _d1) -> torch.Tensor: return _entry(x, alpha)`` (named
    ``fn.name`` after): Python matches keywords and fills the defaults, so the entry always gets every argument
    in order. A parameter named like a Python keyword is taken as ``<name>_``.
    """
    values = python_defaults(fn)
    names = [_python_name(p.name, i) for i, p in enumerate(fn.params)]
    if len(set(names)) < len(names):
        names = [f"arg{i}" for i in range(len(names))]
    params = [f"{n}: {TYPES[param_code(p)].python}" + (f" = _d{i}" if i in values else "")
              for i, (n, p) in enumerate(zip(names, fn.params))]
    code = result_code(fn)
    text = (f"def _function({', '.join(params)}) -> {'None' if code == VOID else TYPES[code].python}:\n"
            f"    return _entry({', '.join(names)})\n")
    return text, {f"_d{i}": v for i, v in values.items()}


def _python_name(name: str, i: int) -> str:
    if not name.isidentifier():
        return f"arg{i}"
    return f"{name}_" if keyword.iskeyword(name) or name == "_entry" or re.fullmatch(r"_d\d+", name) else name
