"""How a torch-style snippet's functions reach Python when jitlab binds them.

- **C-ABI entries** (:mod:`jitlab.jit.cabi`) at the end of the host units that define the functions, made into
  Python functions by jitlab's binder (:mod:`jitlab.jit.engines.binder`): no unit of their own;
- else, where a signature has a type no entry takes, a **binding unit**: declarations and the
  ``PYBIND11_MODULE`` that ``load_inline``'s ``functions=`` makes, on the ``casters`` header set.

A snippet's own ``PYBIND11_MODULE`` of plain ``m.def`` lines (a user's, or the ``functions=`` block
``load_inline`` writes, :func:`functions_block`) is read (:func:`module_functions`): a build calls those
functions through entries as well, with the names, docstrings and error handling the block gives them,
blanks the block from the unit (the file keeps it), and leaves out a C++ source that then only declares them.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import re

import tree_sitter as ts

from jitlab.errors import ArgumentError
from jitlab.jit import cabi, header_sets
from jitlab.jit.parse import Function, SourceFile, line_directive, parameters, syntax_tree
from jitlab.jit.plan import GENERATED, Bound, Unit
from jitlab.jit.pyargs import declaration, pyargs


def bound(units: list[Unit], fns: list[Function]) -> list[Unit]:
    """``units`` with the functions bound: entries at the end of the units that define them when each can be
    called so (:func:`cabi.supported`, in a unit with torch's headers), else a binding unit after them."""
    if fns and all(cabi.supported(fn) and any(u.torch and u.source == fn.path for u in units) for fn in fns):
        return with_entries(units, fns)
    text = binding_unit(fns)
    return [*units, Unit("bind.cpp", "cxx", text, torch=True, module=True, headers=header_sets.binding_set(text))]


def with_entries(units: list[Unit], fns: list[Function]) -> list[Unit]:
    """``units``, each ending with the C-ABI entries of the functions among ``fns`` it defines."""
    return [_with_entries(u, fns) for u in units]


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


# ---- module blocks: the one load_inline writes for functions=, and a snippet's own ---------------------

def functions_block(functions, with_pytorch_error_handling: bool = True) -> str | None:
    """The ``PYBIND11_MODULE`` torch generates for ``functions=`` (names, or name → docstring), or ``None``.

    Raises:
        ArgumentError: ``functions`` is neither a name, a list nor a dict.
    """
    functions = function_names(functions)
    if functions is None:
        return None
    lines = ["PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {"]
    for fn, doc in functions.items():
        target = f"torch::wrap_pybind_function({fn})" if with_pytorch_error_handling else fn
        lines.append(f'm.def("{fn}", {target}, {_c_string(str(doc))});')
    return "\n".join([*lines, "}"])


def function_names(functions) -> dict[str, str] | None:
    """``functions=`` as name → docstring, or ``None``.

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
    return functions


def undeclared(functions, sources: list[str]) -> list[str]:
    """The names in ``functions=`` that no ``cpp_sources`` text can declare: not one of their words, and
    no quoted ``#include`` that might. Torch's build fails on each at its ``m.def`` line; jitlab says so
    before compiling (on a first run that would make a header set: tens of seconds on two cores).
    """
    if any(re.search(r'^\s*#\s*include\s*"', s, re.M) for s in sources):
        return []
    words = {w for s in sources for w in re.findall(r"[A-Za-z_]\w*", s)}
    return [name for name in function_names(functions) or {} if _base_name(name) not in words]


def _base_name(name: str) -> str:
    """The identifier a ``functions=`` entry names: ``f`` of ``ns::f`` and of ``f<float>``."""
    found = re.match(r"\s*([A-Za-z_]\w*)", name.split("<")[0].split("::")[-1])
    return found.group(1) if found else name


def _c_string(s: str) -> str:
    """``s`` as a C string literal (torch pastes docstrings in unescaped; a quote in one broke its build)."""
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def module_functions(files: list[SourceFile]) -> dict[str, Bound]:
    """C++ name → how a snippet's own ``PYBIND11_MODULE`` binds it, when entries can call every function it binds.

    The block (a user's, or the one ``load_inline`` writes for ``functions=``) must be only ``m.def("name",
    target[, "doc"]);`` statements, the target ``&f``, ``f`` or ``torch::wrap_pybind_function(f)``; one file
    has it; each ``f`` is defined once, at the top level, with a signature an entry takes (:func:`cabi.supported`),
    in a file compiled with torch's headers, and bound once; a file that binds a function defined in another
    declares it as it is defined (else the build could bind another function than torch's would). Else ``{}``:
    the block is compiled as written.
    """
    owners = [f for f in files if f.pybind_module]
    block = _module_block(owners[0].text) if len(owners) == 1 else None
    if block is None:
        return {}
    owner, found = owners[0], block[1]
    defined: dict[str, list[tuple[Function, SourceFile]]] = {}
    for f in files:
        for fn in f.functions:
            defined.setdefault(fn.name, []).append((fn, f))
    declared = _prototypes(without_module_block(owner.text))
    if len({b.name for b in found.values()}) < len(found):
        return {}
    for target in found:
        fns = defined.get(target, [])
        if len(fns) != 1:
            return {}
        fn, f = fns[0]
        if fn.kind != "host" or fn.template or fn.internal or "::" in fn.qualname or not cabi.supported(fn) \
                or not (f.language == "cpp" or f.uses_torch):
            return {}
        if f is not owner and declared.get(target) != _linkage(fn.params):
            return {}
    return found


def _module_block(text: str) -> tuple[ts.Node, dict[str, Bound]] | None:
    """The top-level ``PYBIND11_MODULE`` definition of ``text`` and what it binds, if it is only plain ``m.def``s."""
    blocks = [n for n in _top_level(text) if n.type == "function_definition"
              and (n.child_by_field_name("declarator") or n).text.startswith(b"PYBIND11_MODULE")]
    body = blocks[0].child_by_field_name("body") if len(blocks) == 1 else None
    params = blocks[0].child_by_field_name("declarator").child_by_field_name("parameters") if body is not None else None
    if body is None or params is None or len(params.named_children) != 2:
        return None
    module = params.named_children[1].text.decode("utf-8", "surrogateescape")
    found: dict[str, Bound] = {}
    for stmt in body.named_children:
        if stmt.type == "comment":
            continue
        call = stmt.named_children[0] if stmt.type == "expression_statement" and stmt.named_children else None
        read = _plain_def(call, module) if call is not None and call.type == "call_expression" else None
        if read is None or read[0] in found:
            return None
        found[read[0]] = read[1]
    return (blocks[0], found) if found else None


def _plain_def(call: ts.Node, module: str) -> tuple[str, Bound] | None:
    """``(C++ name, Bound)`` of ``m.def("name", target[, "doc"])``, or ``None`` for any other call."""
    fn, args = call.child_by_field_name("function"), call.child_by_field_name("arguments")
    if fn is None or args is None or fn.text.decode("utf-8", "surrogateescape").replace(" ", "") != f"{module}.def":
        return None
    real = [a for a in args.named_children if a.type != "comment"]
    if len(real) not in (2, 3) or real[0].type != "string_literal" or (len(real) == 3 and real[2].type != "string_literal"):
        return None
    target, torch_errors = real[1], False
    if target.type == "call_expression" and target.child_by_field_name("function").text == b"torch::wrap_pybind_function":
        inner = [a for a in target.child_by_field_name("arguments").named_children if a.type != "comment"]
        target, torch_errors = (inner[0] if len(inner) == 1 else None), True
    if target is not None and target.type == "pointer_expression" and target.text.startswith(b"&"):
        target = target.child_by_field_name("argument")
    if target is None or target.type != "identifier":
        return None
    try:
        name, *doc = (ast.literal_eval(a.text.decode("utf-8", "surrogateescape")) for a in (real[0], *real[2:]))
    except (SyntaxError, ValueError):
        return None
    if not isinstance(name, str) or not name.isidentifier():
        return None
    return target.text.decode("utf-8", "surrogateescape"), Bound(name, str(doc[0]) if doc else "", torch_errors)


@functools.lru_cache(maxsize=16)
def _top_level(text: str) -> tuple[ts.Node, ...]:
    """The top-level nodes of ``text``'s syntax tree, parsed once: a plan reads an owner's text (and the text
    with its block blanked) three times, and every build of a snippet plans it again."""
    return tuple(syntax_tree(text.encode("utf-8", "surrogateescape")).root_node.named_children)


def _linkage(params) -> tuple:
    """What of a parameter list names the function to the linker (the types; a top-level const does not)."""
    return tuple((p.base.replace("const ", ""), p.pointer, p.reference, p.const and (p.pointer or p.reference))
                 for p in params)


def _prototypes(text: str) -> dict[str, tuple]:
    """Name → :func:`_linkage` of each function a C++ text declares at its top level."""
    found = {}
    for node in _top_level(text):
        for d in node.named_children if node.type == "declaration" else ():
            name, params = d.child_by_field_name("declarator"), d.child_by_field_name("parameters")
            if d.type == "function_declarator" and name is not None and params is not None:
                found[name.text.decode("utf-8", "surrogateescape")] = _linkage(list(parameters(params)))
    return found


def without_module_block(text: str) -> str:
    """``text`` with its ``PYBIND11_MODULE`` definition blanked, its lines kept."""
    found = _module_block(text)
    if found is None:
        return text
    raw, node = text.encode("utf-8", "surrogateescape"), found[0]
    return (raw[:node.start_byte] + b"\n" * raw[node.start_byte:node.end_byte].count(b"\n")
            + raw[node.end_byte:]).decode("utf-8", "surrogateescape")


def unblocked(files: list[SourceFile]) -> list[SourceFile]:
    """``files`` as their units are made when :func:`module_functions` binds their module block through entries:
    the block blanked (its lines kept), and a C++ file left with declarations only (:func:`declares_only`) left out."""
    out = []
    for f in files:
        if f.pybind_module:
            f = dataclasses.replace(f, text=without_module_block(f.text), pybind_module=None, pybind_defs={})
            if f.language == "cpp" and declares_only(f.text):
                continue
        out.append(f)
    return out


_DECLARATIONS = ("preproc_include", "preproc_call", "preproc_def", "preproc_function_def", "comment",
                 "using_declaration", "alias_declaration", "namespace_alias_definition")


def declares_only(text: str) -> bool:
    """Whether a C++ text only includes headers and declares functions (nothing to compile into an object)."""
    for node in _top_level(text):
        if node.type in _DECLARATIONS:
            continue
        if node.type != "declaration" or any(c.type == "init_declarator" for c in node.named_children):
            return False
        if not any(c.type == "function_declarator" for c in node.named_children):
            return False
    return True
