"""The ``py::arg`` list a generated binding gives each host function: the C++ parameter names as Python
keywords, and a C++ default argument as the Python default when it is a literal.

``torch::Tensor scale(torch::Tensor x, double alpha = 2.0)`` is bound with ``pybind11::arg("x"),
pybind11::arg("alpha") = 2.0``, so ``m.scale(x)`` and ``m.scale(x, alpha=3.0)`` both work. Another default
(a macro, an expression, a constant's name) is evaluated nowhere but in C++, so the argument stays
required; so does every literal default before it, since Python, like C++, needs the defaults last.
"""

from __future__ import annotations

import re

from jitlab.jit.parse import Function, Param

# A number (42, -1.5f, 0x10u, 1e-3), a bool, a string or a character literal.
_LITERAL = re.compile(r"[+-]?(?:0[xX][0-9a-fA-F']+|(?:[0-9][0-9']*\.?[0-9']*|\.[0-9][0-9']*)(?:[eE][+-]?[0-9]+)?)"
                      r"[uUlLfF]*|true|false|\"(?:[^\"\\]|\\.)*\"|'(?:[^'\\]|\\.)+'")
_NULLOPT = ("c10::nullopt", "std::nullopt", "at::nullopt", "::std::nullopt")


def _python_default(p: Param) -> str | None:
    """The C++ expression pybind casts to ``p``'s Python default, or ``None`` when its default is not a literal."""
    if p.default is None:
        return None
    if _LITERAL.fullmatch(p.default):
        return p.default
    return "pybind11::none()" if p.default in _NULLOPT and "optional" in p.base.lower() else None


def defaults(fn: Function) -> list[str | None]:
    """Each parameter's Python default: ``None`` where it has none, or a later parameter is required."""
    out: list[str | None] = []
    required = False
    for p in reversed(fn.params):
        default = None if required else _python_default(p)
        required = default is None
        out.append(default)
    return out[::-1]


def pyargs(fn: Function) -> str:
    """``, pybind11::arg("x"), pybind11::arg("alpha") = 2.0``: what ``m.def`` takes after the function."""
    return "".join(f', pybind11::arg("{p.name}")' + (f" = {d}" if d else "") for p, d in zip(fn.params, defaults(fn)))


def required_defaults(fn: Function) -> str:
    """A build note for the C++ defaults of ``fn`` Python cannot give (``""`` when there are none)."""
    kept = [f"`{p.text}`" for p, d in zip(fn.params, defaults(fn)) if p.default is not None and d is None]
    if not kept:
        return ""
    return (f"{fn.name}(): {', '.join(kept)}: a default that is not a literal (or comes before one that is not) "
            f"is C++ only, so Python must pass the argument; write the default as a literal to make it optional")


def declaration(fn: Function) -> str:
    """``fn``'s C++ declaration without its default arguments, which the generated unit may not be able to
    evaluate (a macro or constant of the snippet's); the binding gives Python the literal ones."""
    if all(p.default is None for p in fn.params):
        return fn.signature()
    params = [re.sub(r"\s*=\s*" + re.escape(p.default) + r"\s*$", "", p.text) if p.default else p.text
              for p in fn.params]
    return f"{'__global__ ' if fn.kind == 'global' else ''}{fn.returns} {fn.qualname}({', '.join(params)})"
