"""How a torch-style snippet's functions reach Python when jitlab binds them.

- **C-ABI entries** (:mod:`jitlab.jit.cabi`) at the end of the host units that define the functions, made into
  Python functions by jitlab's binder (:mod:`jitlab.jit.engines.binder`): no unit of their own;
- else, where a signature has a type no entry takes, a **binding unit**: declarations and the
  ``PYBIND11_MODULE`` that ``load_inline``'s ``functions=`` makes, on the ``casters`` header set.

``load_inline``'s ``functions=`` block itself is written here as torch writes it (:func:`functions_block`)
and read back (:func:`read_functions_block`): a build calls those functions through entries as well, blanks
the block from the unit (the file keeps it), and leaves out a C++ source that then only declares them.
"""

from __future__ import annotations

import ast
import dataclasses
import re

from jitlab.errors import ArgumentError
from jitlab.jit import cabi, header_sets
from jitlab.jit.parse import Function, SourceFile, line_directive, parameters, syntax_tree
from jitlab.jit.plan import GENERATED, Unit
from jitlab.jit.pyargs import declaration, pyargs



def bound(units: list[Unit], fns: list[Function]) -> list[Unit]:
    """``units`` with the functions bound: entries at the end of the units that define them when each can be
    called so (:func:`cabi.supported`, in a unit with torch's headers), else a binding unit after them."""
    if fns and all(cabi.supported(fn) and any(u.torch and u.source == fn.path for u in units) for fn in fns):
        return [_with_entries(u, fns) for u in units]
    text = binding_unit(fns)
    return [*units, Unit("bind.cpp", "cxx", text, torch=True, module=True, headers=header_sets.binding_set(text))]


def _with_entries(unit: Unit, fns: list[Function]) -> Unit:
    own = [fn for fn in fns if unit.torch and fn.path == unit.source]
    if not own:
        return unit
    return dataclasses.replace(unit, text=f"{unit.text}\n{line_directive(f'{GENERATED}.cpp')}{cabi.entries(own)}",
                               entries=True)


def binding_unit(fns: list[Function]) -> str:
    """The generated binding unit: declarations, then the module ``load_inline``'s ``functions=`` makes."""
    defs = "".join(f'  m.def("{fn.name}", torch::wrap_pybind_function({fn.name}), "{fn.name}"{pyargs(fn)});\n'
                   for fn in fns)
    return (line_directive(f"{GENERATED}.cpp") + declarations(fns)
            + f"PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {{\n{defs}}}\n")


def declarations(fns: list[Function]) -> str:
    """C++ declarations of ``fns`` (no defaults), one per line, for a unit that calls them without defining them."""
    return "".join(f"{declaration(fn)};\n" for fn in fns)


# ---- load_inline's functions= block -------------------------------------------------------------------

def functions_block(functions, with_pytorch_error_handling: bool = True) -> str | None:
    """The ``PYBIND11_MODULE`` torch generates for ``functions=`` (names, or name → docstring), or ``None``.

    Raises:
        ArgumentError: ``functions`` is neither a name, a list nor a dict.
    """
    if functions is None:
        return None
    if isinstance(functions, str):
        functions = [functions]
    if isinstance(functions, (list, tuple)):
        functions = {f: f for f in functions}
    if not isinstance(functions, dict):
        raise ArgumentError(f"functions= takes a list of names or a dict of name → docstring, "
                            f"not {type(functions).__name__}")
    lines = ["PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {"]
    for fn, doc in functions.items():
        target = f"torch::wrap_pybind_function({fn})" if with_pytorch_error_handling else fn
        lines.append(f'm.def("{fn}", {target}, {_c_string(str(doc))});')
    return "\n".join([*lines, "}"])


def _c_string(s: str) -> str:
    """``s`` as a C string literal (torch pastes docstrings in unescaped; a quote in one broke its build)."""
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


# The block functions_block writes with torch's error handling, at the end of a file: (name, docstring) lines.
_BLOCK = re.compile(r'\nPYBIND11_MODULE\(TORCH_EXTENSION_NAME, m\) \{\n((?:m\.def\("\w+", torch::wrap_pybind_function\(\w+\), '
                    r'"(?:[^"\\\n]|\\.)*"\);\n)+)\}\s*\Z')
_DEF = re.compile(r'm\.def\("(\w+)", torch::wrap_pybind_function\((\w+)\), ("(?:[^"\\\n]|\\.)*")\);')


def read_functions_block(text: str) -> dict[str, str]:
    """Name → docstring of the ``functions=`` block that ends ``text`` (:func:`functions_block`), or ``{}``."""
    found = _BLOCK.search(text)
    if found is None:
        return {}
    defs = _DEF.findall(found.group(1))
    if any(name != target for name, target, _ in defs):
        return {}
    return {name: ast.literal_eval(doc) for name, _, doc in defs}


def without_functions_block(text: str) -> str:
    """``text`` with its ``functions=`` block blanked, its lines kept."""
    found = _BLOCK.search(text)
    return text if found is None else text[:found.start()] + "\n" * found.group(0).count("\n")


def inline_functions(files: list[SourceFile]) -> dict[str, str]:
    """Name → docstring of the functions a ``functions=`` block binds, when entries can call them all: one file
    has a module and it is that block; each function is defined once, at the top level, with a signature an
    entry takes. Else ``{}`` (the block is compiled as written)."""
    owners = [f for f in files if f.pybind_module]
    if len(owners) != 1:
        return {}
    block = read_functions_block(owners[0].text)
    defined: dict[str, list[Function]] = {}
    for f in files:
        for fn in f.functions:
            defined.setdefault(fn.name, []).append(fn)
    declared = _prototypes(without_functions_block(owners[0].text))
    for name in block:
        fns = defined.get(name, [])
        if len(fns) != 1 or fns[0].kind != "host" or fns[0].template or fns[0].internal or "::" in fns[0].qualname \
                or not cabi.supported(fns[0]):
            return {}
        if fns[0].path != str(owners[0].path) and declared.get(name) != _linkage(fns[0].params):
            return {}  # the block binds a declaration the definition may not match: compiled as written, as torch does
    return block


def _linkage(params) -> tuple:
    """What of a parameter list names the function to the linker (the types; a top-level const does not)."""
    return tuple((p.base.replace("const ", ""), p.pointer, p.reference, p.const and (p.pointer or p.reference))
                 for p in params)


def _prototypes(text: str) -> dict[str, tuple]:
    """Name → :func:`_linkage` of each function a C++ text declares at its top level."""
    found = {}
    for node in syntax_tree(text.encode("utf-8", "surrogateescape")).root_node.named_children:
        for d in node.named_children if node.type == "declaration" else ():
            name, params = d.child_by_field_name("declarator"), d.child_by_field_name("parameters")
            if d.type == "function_declarator" and name is not None and params is not None:
                found[name.text.decode("utf-8", "surrogateescape")] = _linkage(list(parameters(params)))
    return found


def unblocked(files: list[SourceFile]) -> list[SourceFile]:
    """``files`` as their units are made when :func:`inline_functions` binds their ``functions=`` block: the
    block blanked (its lines kept), and a C++ file left with declarations only (:func:`declares_only`) left out."""
    out = []
    for f in files:
        if f.pybind_module:
            f = dataclasses.replace(f, text=without_functions_block(f.text), pybind_module=None, pybind_defs={})
            if f.language == "cpp" and declares_only(f.text):
                continue
        out.append(f)
    return out


_DECLARATIONS = ("preproc_include", "preproc_call", "preproc_def", "preproc_function_def", "comment",
                 "using_declaration", "alias_declaration", "namespace_alias_definition")


def declares_only(text: str) -> bool:
    """Whether a C++ text only includes headers and declares functions (nothing to compile into an object)."""
    for node in syntax_tree(text.encode("utf-8", "surrogateescape")).root_node.named_children:
        if node.type in _DECLARATIONS:
            continue
        if node.type != "declaration" or any(c.type == "init_declarator" for c in node.named_children):
            return False
        if not any(c.type == "function_declarator" for c in node.named_children):
            return False
    return True
