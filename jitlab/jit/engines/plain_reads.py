"""The reads that the CPU emulator's plain runs take without an access hook.

Every load of an emulated unit calls a hook (``-fsanitize=thread``, answered by ``simt/memory_checks.inc``), and
the call costs more than the read: no xmm register survives it, so an accumulator lives in memory. Two kinds of
read need no hook in a plain run (no race detector):

* a ``__shared__`` array indexed in full, ``tile[ty][k]``, every index inside its extent (which
  ``-fsanitize=bounds`` checks anyway);
* a pointer parameter indexed once, ``a[row * n + k]``, when the element lies whole inside one of the launch's
  first tensors (what the hook's fast path tests).

:func:`edits` rewrites such reads, where the value is all that is used (on the right of ``=``, in arithmetic, an
initialiser), into a choice made at run time, on the same line: in assembly when the test holds
(``jitlab_simt::unhooked_read``), otherwise the read as written, at the user's line, where ``-fsanitize=bounds``
names a bad index, the hook names a bad address (``x[n]``, ``x[-1]``) and a checked run's hook sees the access.
``volatile`` arrays (a spin-wait's flag gives way in its hook), names declared twice in a function, reads used
as lvalues (``&x[i]``, ``x[i] += v``, a reference, a call's argument), and reads inside ``assert(...)`` or a
capitalised macro's arguments (whose text may be printed) are left as they are.

A store to a ``__shared__`` array indexed in full, as a statement of its own (``tile[ty][tx] = v;``), needs no hook
in a plain run either: it becomes the same choice, stored in assembly (``jitlab_simt::plain_store``) when every index
is inside its extent. Not a compound assignment, a braced value, or indices that call or assign (they would be
computed before the value here, after it as written).
"""

from __future__ import annotations

from collections import Counter

#: The SIMT header's tests a rewritten read calls: a plain run's and every index inside its extent; and every index
#: alone (what a lock-step twin, run in plain runs only, calls instead: :mod:`jitlab.jit.engines.lockstep`).
PLAIN_READ, WITHIN = "plain_read", "plain_within"
#: The test a rewritten read of a pointer parameter calls; a twin calls ``in_spans(jitlab_spans, p)`` with the
#: launch's tensors read once.
IN_TENSOR = "in_tensor"
#: Nodes whose ``declarator`` field names what they declare.
_DECLARES = {"declaration", "parameter_declaration", "field_declaration", "optional_parameter_declaration"}


def walk(root):
    """``root`` and every named node under it, in source order."""
    stack = [root]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(reversed(node.named_children))


def rendered(src: bytes, edits, start: int = 0, end: int | None = None) -> str:
    """``src[start:end]`` with the (start, end, replacement) edits that lie inside it applied, decoded as read."""
    end = len(src) if end is None else end
    out, pos = [], start
    for s, e, new in sorted(x for x in edits if start <= x[0] and x[1] <= end):
        out += [src[pos:s], new]
        pos = e
    out.append(src[pos:end])
    return b"".join(out).decode("utf-8", "surrogateescape")


def _declared_name(node):
    """The identifier a declarator declares (through pointers, arrays, references), or None."""
    while node is not None and node.type != "identifier":
        if node.type in ("array_declarator", "pointer_declarator", "init_declarator", "function_declarator"):
            node = node.child_by_field_name("declarator")
        elif node.type == "reference_declarator":
            node = next(iter(node.named_children), None)
        else:
            return None
    return node


def _function_of(node):
    """The function definition ``node`` is in (its scope), or None at file scope."""
    node = node.parent
    while node is not None and node.type != "function_definition":
        node = node.parent
    return node


def _scope_key(node):
    f = _function_of(node)
    return None if f is None else (f.start_byte, f.end_byte)


def readable(root) -> dict:
    """``__shared__`` arrays with a size in every dimension and pointer parameters, neither ``volatile``, by the
    scope a read of the name means them in: ``(scope, name)`` → number of dimensions (0: a pointer, read with one
    index), where a scope is a function definition's (start, end) bytes. An array declared in a function counts there if nothing else in the function is declared by its name;
    one at file scope, in every function that declares nothing by its name."""
    declared: Counter = Counter()
    found: dict = {}
    functions = set()
    for node in walk(root):
        if node.type == "function_definition":
            functions.add((node.start_byte, node.end_byte))
        if node.type not in _DECLARES:
            continue
        scope = _scope_key(node)
        for d in node.children_by_field_name("declarator"):
            name = _declared_name(d)
            if name is not None:
                declared[scope, name.text] += 1
        if node.type == "parameter_declaration":
            d = node.child_by_field_name("declarator")
            kinds = {c.text for c in node.children if c.type == "type_qualifier"}
            if d is not None and d.type == "pointer_declarator" and b"volatile" not in kinds:
                name = d.child_by_field_name("declarator")
                if name is not None and name.type == "identifier":
                    found[scope, name.text] = 0  # a pointer: one index, read where it lies in a tensor
            continue
        if node.type != "declaration":
            continue
        qualifiers = {c.text for c in node.children if c.type in ("type_qualifier", "storage_class_specifier")}
        if b"__shared__" not in qualifiers or b"volatile" in qualifiers or b"extern" in qualifiers:
            continue
        for d in node.children_by_field_name("declarator"):
            dims = 0
            while d is not None and d.type == "array_declarator" and d.child_by_field_name("size") is not None:
                dims, d = dims + 1, d.child_by_field_name("declarator")
            if dims and d is not None and d.type == "identifier":
                found[scope, d.text] = dims
    arrays = {key: dims for key, dims in found.items() if declared[key] == 1}
    for (scope, name), dims in list(arrays.items()):
        if scope is None:
            arrays.pop((scope, name))
            arrays.update({(f, name): dims for f in functions if declared[f, name] == 0})
    return arrays


def _chain(node):
    """``a[i][j]`` → (``a``, [i, j]) when every subscript has one index; else None."""
    indices = []
    while node.type == "subscript_expression":
        args = node.child_by_field_name("indices")
        if args is None or len(args.named_children) != 1:
            return None
        indices.insert(0, args.named_children[0])
        node = node.child_by_field_name("argument")
        if node is None:
            return None
    return (node, indices) if node.type == "identifier" else None


def _in_macro(node) -> bool:
    """Whether ``node`` is an argument of ``assert`` or of a call whose name is in capitals (by convention a
    macro): the argument's text may be printed (``assert`` shows its expression), so it stays the user's."""
    node = node.parent
    while node is not None and node.type != "function_definition":
        if node.type == "call_expression":
            callee = node.child_by_field_name("function")
            name = callee.text if callee is not None and callee.type == "identifier" else b""
            if name == b"assert" or (name.upper() == name and any(c in b"ABCDEFGHIJKLMNOPQRSTUVWXYZ" for c in name)):
                return True
        node = node.parent
    return False


def _value_only(node) -> bool:
    """Whether only ``node``'s value is used: an operand of arithmetic or a comparison, the right of an
    assignment, a non-reference initialiser, a ``-``/``+``/``!``/``~`` operand, a cast to a non-reference."""
    while node.parent is not None and node.parent.type == "parenthesized_expression":
        node = node.parent
    parent = node.parent
    if parent is None:
        return False

    def field_is(name: str) -> bool:
        child = parent.child_by_field_name(name)
        return child is not None and (child.start_byte, child.end_byte) == (node.start_byte, node.end_byte)

    if parent.type == "binary_expression":
        return True
    if parent.type == "assignment_expression":
        return field_is("right")
    if parent.type == "init_declarator":
        declarator = parent.child_by_field_name("declarator")
        return field_is("value") and declarator is not None and declarator.type != "reference_declarator"
    if parent.type == "unary_expression":
        op = parent.child_by_field_name("operator")
        return op is not None and op.text in (b"-", b"+", b"!", b"~")
    if parent.type == "cast_expression":
        kind = parent.child_by_field_name("type")
        return field_is("value") and kind is not None and b"&" not in kind.text
    return False


def _store(node, src: bytes, arrays, reads) -> tuple[int, int, bytes] | None:
    """``tile[ty][tx] = v;`` (a statement: its value unused), the array ``__shared__`` and indexed in full: in a plain
    run, every index inside its extent, stored without the hook (nothing but the race detector would read it)."""
    if node.type != "assignment_expression" or node.parent is None or node.parent.type != "expression_statement":
        return None
    op, left, right = (node.child_by_field_name(f) for f in ("operator", "left", "right"))
    if op is None or op.text != b"=" or left is None or right is None or left.type != "subscript_expression" or \
            b"\n" in src[node.start_byte:node.end_byte] or _in_macro(node):
        return None
    chain = _chain(left)
    dims = arrays.get((_scope_key(node), chain[0].text)) if chain else None
    if not dims or len(chain[1]) != dims or right.type == "initializer_list":
        return None
    # the indices are computed before the value here (C++17 computes the value first): only where neither can tell
    if any(n.type in ("update_expression", "assignment_expression", "call_expression") for x in chain[1]
           for n in walk(x)):
        return None
    ids = [f"jitlab_i{k}" for k in range(dims)]
    decls = "".join(f"auto {i} = ({rendered(src, reads, x.start_byte, x.end_byte)}); " for i, x in zip(ids, chain[1]))
    value = rendered(src, reads, right.start_byte, right.end_byte)
    at = "jitlab_a" + "".join(f"[{i}]" for i in ids)
    text = (f"(__extension__({{ auto& jitlab_a = {chain[0].text.decode('utf-8', 'surrogateescape')}; {decls}"
            f"const auto jitlab_v = ({value}); ::jitlab_simt::{PLAIN_READ}(jitlab_a, {', '.join(ids)}) ? "
            f"::jitlab_simt::plain_store(jitlab_a, jitlab_v, {', '.join(ids)}) : (void)({at} = jitlab_v); }}))")
    return node.start_byte, node.end_byte, text.encode("utf-8", "surrogateescape")


def edits(root, src: bytes) -> list[tuple[int, int, bytes]]:
    """(start, end, replacement) for each read to take without a hook in plain runs (and each store to a shared array
    as a statement), none inside another and each on one line (the unit's lines stay the user's)."""
    arrays = readable(root)
    if not arrays:
        return []
    found = []
    for node in walk(root):
        if node.type != "subscript_expression" or b"\n" in src[node.start_byte:node.end_byte]:
            continue
        chain = _chain(node)
        if chain is None or not _value_only(node) or _in_macro(node):
            continue
        dims = arrays.get((_scope_key(node), chain[0].text))
        if dims is None or len(chain[1]) != max(dims, 1):
            continue
        found.append((node.start_byte, node.end_byte, chain, dims == 0))
    found.sort(key=lambda f: (f[0], -f[1]))
    out, end = [], -1
    for start, stop, (name, indices), pointer in found:
        if start < end:  # inside one already rewritten: its text is copied whole, read with the hook
            continue
        end = stop
        if pointer:
            index = src[indices[0].start_byte:indices[0].end_byte].decode("utf-8", "surrogateescape")
            text = (f"(__extension__({{ const auto* jitlab_p = &{name.text.decode('utf-8', 'surrogateescape')}"
                    f"[{index}]; ::jitlab_simt::{IN_TENSOR}(jitlab_p) ? ::jitlab_simt::unhooked_read(*jitlab_p) "
                    f": *jitlab_p; }}))")
            out.append((start, stop, text.encode("utf-8", "surrogateescape")))
            continue
        ids = [f"jitlab_i{k}" for k in range(len(indices))]
        decls = "".join(f"auto {i} = ({src[x.start_byte:x.end_byte].decode('utf-8', 'surrogateescape')}); "
                        for i, x in zip(ids, indices))
        at = "jitlab_a" + "".join(f"[{i}]" for i in ids)
        text = (f"(__extension__({{ auto& jitlab_a = {name.text.decode('utf-8', 'surrogateescape')}; {decls}"
                f"::jitlab_simt::{PLAIN_READ}(jitlab_a, {', '.join(ids)}) ? ::jitlab_simt::unhooked_read("
                f"::jitlab_simt::plain_at(jitlab_a, {', '.join(ids)})) : {at}; }}))")
        out.append((start, stop, text.encode("utf-8", "surrogateescape")))
    # stores to shared arrays, their indices' and values' reads rewritten inside them
    stores = [e for e in (_store(n, src, arrays, out) for n in walk(root)) if e is not None]
    return [r for r in out if not any(s <= r[0] and r[1] <= e for s, e, _ in stores)] + stores
