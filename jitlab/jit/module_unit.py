"""A split file's own ``PYBIND11_MODULE`` in a unit of its own, so its host functions compile on ``host``.

A host unit that holds the module needs torch's pybind11 casters (the ``bind`` header set), whose
template instantiations cost every edit of it ~1.7 s of CPU more than the ``host`` set (an AT_DISPATCH
host unit: 4.3 s on ``bind``, which also parses torch's CUDA headers; 2.2 s on ``host``). So the host
unit's text is made into two units:

- ``<stem>.host.cpp``: the host unit with the module block blanked (newlines kept), on ``host``;
- ``<stem>.module.cpp``: the host unit with the bodies of its external functions made declarations
  (``;``, newlines kept), on ``casters`` (``bind`` if it names more): everything the block can name is
  declared as the file declares it, and a body edit that keeps the line count leaves its text, and its
  object, unchanged.

It stays one unit when that could change what the program does: a namespace-scope variable that is
not constant (two units would hold two of a ``static`` one, or define an external one twice), a
function returning ``auto`` (its declaration cannot be used), an explicit specialization (defined
once), a macro call at namespace scope (it may define anything), or a module block not at the top level.
"""

from __future__ import annotations

import re

import tree_sitter as ts

from jitlab.jit import header_sets
from jitlab.jit.plan import Unit
from jitlab.jit.parse import syntax_tree

_SCOPES = ("preproc_if", "preproc_ifdef", "preproc_else", "preproc_elif", "preproc_elifdef", "declaration_list")


def host_units(stem: str, host: str, owns_module: bool, umbrella: bool, source: str) -> list[Unit]:
    """The host unit of a split ``.cu`` file and, when it holds its module and that can be separated, the module unit.

    Args:
        stem: The file's stem.
        host: The host unit's text (:func:`jitlab.jit.split.split`'s, with its prelude).
        owns_module: The file holds a ``PYBIND11_MODULE``.
        umbrella: A local header includes torch's umbrella header (every unit on ``full``).
        source: The user's file's path.
    """
    parts = separate(host) if owns_module else None
    if parts is None:
        return [Unit(f"{stem}.host.cpp", "cxx", host, torch=True, module=owns_module,
                     headers="full" if umbrella else "bind" if owns_module else "host", source=source)]
    functions, module = parts
    return [Unit(f"{stem}.host.cpp", "cxx", functions, torch=True, headers="full" if umbrella else "host",
                 source=source),
            Unit(f"{stem}.module.cpp", "cxx", module, torch=True, module=True,
                 headers="full" if umbrella else header_sets.binding_set(module), source=source)]


def separate(host: str) -> tuple[str, str] | None:
    """``(host unit without the module block, module unit)``, or ``None`` when it must stay one unit.

    Only the user's part is read (after the first ``#line``): jitlab's prelude is inline and templates.
    """
    start = host.find("#line ")
    prelude, src = host[:max(start, 0)].encode("utf-8", "surrogateescape"), host[max(start, 0):].encode("utf-8", "surrogateescape")
    blocks, bodies, internal = [], [], set()
    if not _walk(syntax_tree(src).root_node, blocks, bodies, internal, top=True) or len(blocks) != 1:
        return None
    block = blocks[0]
    if any(re.search(rf"\b{re.escape(name)}\b", block.text.decode("utf-8", "surrogateescape")) for name in internal):
        return None  # the module unit would call its own copy of a static function (its own statics)
    functions = src[:block.start_byte] + _newlines(block.text) + src[block.end_byte:]
    module, pos = [prelude], 0
    for body in sorted(bodies, key=lambda b: b.start_byte):
        module += [src[pos:body.start_byte], b";" + _newlines(body.text)]
        pos = body.end_byte
    module.append(src[pos:])
    return (prelude + functions).decode("utf-8", "surrogateescape"), b"".join(module).decode("utf-8", "surrogateescape")


def _walk(node: ts.Node, blocks: list, bodies: list, names: set, top: bool, internal: bool = False) -> bool:
    """Collect the module block, the bodies to make declarations and the names of internal functions;
    ``False`` when it must stay one unit."""
    for child in node.named_children:
        kind = child.type
        if kind.startswith(_SCOPES) or kind == "linkage_specification":
            body = child.child_by_field_name("body") if kind == "linkage_specification" else child
            if body is not None and body.type == "function_definition":
                if not _function(body, blocks, bodies, names, top, internal):
                    return False
            elif body is not None and not _walk(body, blocks, bodies, names, top, internal):
                return False
        elif kind == "namespace_definition":
            body = child.child_by_field_name("body")
            anonymous = child.child_by_field_name("name") is None
            if body is not None and not _walk(body, blocks, bodies, names, False, internal or anonymous):
                return False
        elif kind == "function_definition":
            if not _function(child, blocks, bodies, names, top, internal):
                return False
        elif kind == "declaration" and not _constant_or_prototype(child):
            return False
        elif kind == "template_declaration" and re.match(r"template\s*<\s*>", child.text.decode("utf-8", "surrogateescape")):
            return False  # an explicit specialization is an external definition: it cannot be in both units
        elif kind == "ERROR" or (kind == "expression_statement" and child.text.strip() != b";"):
            return False  # a macro that may define something (`DEFINE_OP(scale);`)
    return True


def _function(fn: ts.Node, blocks: list, bodies: list, names: set, top: bool, internal: bool) -> bool:
    declarator = fn.child_by_field_name("declarator")
    name = declarator.text.decode("utf-8", "surrogateescape") if declarator is not None else ""
    if name.startswith("PYBIND11_MODULE"):
        blocks.append(fn)
        return top
    words = {c.text.decode("utf-8", "surrogateescape") for c in fn.children if c.type in ("storage_class_specifier", "type_qualifier")}
    words |= {c.type for c in fn.children}
    own = re.search(r"(\w+)\s*\(", name)
    if (internal or "static" in words) and own:
        names.add(own.group(1))
    if internal or words & {"static", "inline", "constexpr", "__forceinline__"}:
        return True  # internal or inline: defined in both units, as the file defines it
    kind = fn.child_by_field_name("type")
    if kind is not None and re.search(r"\bauto\b", kind.text.decode("utf-8", "surrogateescape")):
        return False
    body = fn.child_by_field_name("body")
    if body is not None:
        bodies.append(body)
    return True


def _constant_or_prototype(decl: ts.Node) -> bool:
    """A namespace-scope declaration both units may hold: a prototype, a constant, an ``extern``, a type."""
    words = {c.text.decode("utf-8", "surrogateescape") for c in decl.children if c.type in ("storage_class_specifier", "type_qualifier")}
    words |= {c.type for c in decl.children}
    if words & {"constexpr", "extern", "typedef"}:
        return True
    if "const" in words:  # a constant (internal), unless it is a pointer to const (one external variable)
        inner = [c.child_by_field_name("declarator") if c.type == "init_declarator" else c for c in decl.named_children]
        return not any(c is not None and c.type == "pointer_declarator" for c in inner)
    declarators = [c for c in decl.named_children if c.type.endswith("declarator") or c.type == "identifier"]
    return bool(declarators) and all(c.type == "function_declarator" for c in declarators)


def _newlines(text: bytes) -> bytes:
    return b"\n" * text.count(b"\n")
