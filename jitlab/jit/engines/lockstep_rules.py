"""What a lock-step twin cannot run (:mod:`jitlab.jit.engines.lockstep`), read from the syntax tree.

A file keeps all its kernels with the fibers when it includes a header of its own or has a macro naming a warp
collective, a barrier or a spin-wait (what the macro's use hides). A kernel keeps them (:func:`check`) when it is a
template, reaches a warp collective, cooperative groups, a ``__syncthreads_*`` variant or a spin-wait (``volatile``,
``atomicCAS``: a twin's thread would wait for a thread that runs after it), in its body or through a function of the
file; when a barrier stands elsewhere than as a statement of a block, loop or ``if``; on ``goto``, ``asm``, a
``break``/``continue`` of a loop holding a barrier, or a ``__shared__`` array used other than indexed in full. (The
writer refuses a name declared twice in the kernel when that name needs a slot: two slots of one name would clash.)
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

from jitlab.jit.engines.plain_reads import walk

#: What a twin cannot run (a warp collective, a barrier other than ``__syncthreads()``, cooperative groups).
SYNC = re.compile(r"^(?:__syncthreads\w+|__syncwarp|__shfl\w*|__ballot_sync|__any_sync|__all_sync|__activemask|"
                  r"__reduce_\w+_sync|__match_\w+_sync|__nanosleep|cooperative_groups|this_thread_block|"
                  r"tiled_partition|coalesced_threads|this_grid|thread_block\w*|grid_group)$")
#: What may wait for another thread of the block in a loop (a spin-wait: the fibers give way in it, a twin's thread
#: would wait for a thread that runs after it).
SPIN = re.compile(r"^(?:volatile|atomicCAS\w*|atomic_ref|atomic|__atomic_load\w*|__atomic_compare_exchange\w*|"
                  r"__ldcv|__ldvolatile)$")
BARRIER = "__syncthreads"
CARRIERS = {"compound_statement", "for_statement", "while_statement", "if_statement"}
LOOPS = {"for_statement", "while_statement", "do_statement", "for_range_loop", "switch_statement"}
_WORD = re.compile(rb"[A-Za-z_]\w*")


class Refused(Exception):
    """The kernel stays with the fibers; the message says why (what a test reads)."""


def text(node) -> str:
    return node.text.decode("utf-8", "surrogateescape")


def is_barrier(stmt) -> bool:
    """``__syncthreads();`` as a statement of its own."""
    if stmt.type != "expression_statement" or len(stmt.named_children) != 1:
        return False
    call = stmt.named_children[0]
    fn = call.child_by_field_name("function") if call.type == "call_expression" else None
    args = call.child_by_field_name("arguments") if fn is not None else None
    return fn is not None and fn.type == "identifier" and fn.text == BARRIER.encode() and args is not None and \
        not args.named_children


def holds_barrier(node) -> bool:
    return any(n.type == "identifier" and n.text == BARRIER.encode() for n in walk(node))


def first_barrier(node):
    return next(n for n in walk(node) if is_barrier(n))


def statements(node) -> list:
    if node.type == "compound_statement":
        return [c for c in node.named_children if c.type != "comment"]
    return [node]


def declared(declarator):
    """(identifier node, kind) of one declarator: kind is "value", "pointer" or "array"; None when a twin cannot
    give it a slot (a reference, a function, an unsized array, an array of pointers)."""
    node, kind = declarator, "value"
    if node.type == "init_declarator":
        node = node.child_by_field_name("declarator")
    while node is not None and node.type == "pointer_declarator":
        kind, node = "pointer", node.child_by_field_name("declarator")
    if node is not None and node.type == "array_declarator":
        if kind == "pointer":
            return None
        kind = "array"
        while node is not None and node.type == "array_declarator":
            if node.child_by_field_name("size") is None:
                return None
            node = node.child_by_field_name("declarator")
    return (node, kind) if node is not None and node.type == "identifier" else None


def check(fn, syncing: set) -> tuple[bool, Counter]:
    """Raise :class:`Refused` where a twin cannot run the kernel ``fn`` (a function definition); whether it returns
    anywhere (its twin then tracks the threads that returned), and how often each name is declared in it (a name
    that gets a slot must be declared once: the writer asks)."""
    returns = False
    if fn.has_error:
        raise Refused("the parser could not read the kernel")
    if fn.parent is not None and fn.parent.type == "template_declaration":
        raise Refused("a kernel template")
    body = fn.child_by_field_name("body")
    names: Counter = Counter()
    for n in walk(fn):
        if n.type in ("goto_statement", "labeled_statement", "gnu_asm_expression", "asm_statement",
                      "kernel_call_syntax"):
            raise Refused(f"{n.type.replace('_', ' ')} in the kernel")
        if n.type == "identifier":
            word = text(n)
            called = n.parent.type == "call_expression" and n.parent.child_by_field_name("function") == n
            if SYNC.match(word) or SPIN.match(word) or (called and word in syncing):
                raise Refused(f"{word} in the kernel")
            if word == BARRIER and not (n.parent.type == "call_expression" and is_barrier(n.parent.parent)):
                raise Refused("__syncthreads() inside an expression")
        if n.type in ("namespace_identifier", "type_identifier", "type_qualifier") and (
                SYNC.match(text(n)) or SPIN.match(text(n))):
            raise Refused(f"{text(n)} in the kernel")
        if n.type in ("declaration", "parameter_declaration"):
            for d in n.children_by_field_name("declarator"):
                got = declared(d)
                if got is not None:
                    names[text(got[0])] += 1
        if n.type in ("break_statement", "continue_statement"):
            owner = n.parent
            while owner is not None and owner.type not in LOOPS and owner.type != "lambda_expression":
                owner = owner.parent
            if owner is not None and owner.type in LOOPS and holds_barrier(owner):
                raise Refused(f"a break or continue of a {owner.type.split('_')[0]} holding a barrier")
        if n.type == "return_statement":
            returns = True
    check_shared(body)
    for n in walk(body):
        if is_barrier(n):
            up = n.parent
            while up is not None and up != body:
                if up.type not in CARRIERS and up.type != "else_clause":
                    raise Refused(f"a barrier inside a {up.type.replace('_', ' ')}")
                up = up.parent
    return returns, names

def check_shared(body) -> None:
    """A twin has ``__shared__`` arrays of its own (the kernel's are its function's statics): each must be indexed
    in full wherever it is used, so that -fsanitize=bounds tests each index against the array's own extent (a
    pointer into one could run on into the other function's arrays, where no check would see it)."""
    arrays = {}
    for n in walk(body):
        if n.type != "declaration" or not any(c.text == b"__shared__" for c in n.children):
            continue
        for d in n.children_by_field_name("declarator"):
            dims = 0
            while d is not None and d.type == "array_declarator":
                dims, d = dims + 1, d.child_by_field_name("declarator")
            if dims and d is not None and d.type == "identifier":
                arrays[text(d)] = dims
    for n in walk(body):
        if n.type != "identifier" or text(n) not in arrays or n.parent.type == "array_declarator":
            continue
        node, depth = n, 0
        while node.parent is not None and node.parent.type == "subscript_expression" and \
                node.parent.child_by_field_name("argument") == node:
            node, depth = node.parent, depth + 1
        if depth != arrays[text(n)] and not (n.parent.type == "parenthesized_expression" and
                                               n.parent.parent.type == "sizeof_expression"):
            raise Refused(f"the __shared__ array {text(n)} used other than indexed in full")


def assigned(ident, by_reference: bool) -> bool:
    """Whether this use of a parameter may change it: assigned (whole, or a member of a struct), stepped, its address
    taken, or (``by_reference``: a function of the file takes a reference) passed to a call."""
    node = ident
    while node.parent is not None and (node.parent.type == "parenthesized_expression" or (
            node.parent.type == "field_expression" and node.parent.child_by_field_name("argument") == node and
            node.parent.child_by_field_name("operator") is not None and
            node.parent.child_by_field_name("operator").text == b".")):
        node = node.parent
    parent = node.parent
    if parent is None:
        return False
    if parent.type == "assignment_expression":
        return parent.child_by_field_name("left") == node
    if parent.type == "update_expression":
        return True
    if parent.type == "argument_list":
        return by_reference
    return parent.type == "pointer_expression" and parent.children[0].type == "&"


def syncing(root) -> set:
    """Names of the file's functions that reach a warp collective, cooperative groups or a barrier, directly or
    through another such function."""
    bodies = {}
    for n in walk(root):
        if n.type == "function_definition":
            d = n.child_by_field_name("declarator")
            while d is not None and d.type not in ("function_declarator",):
                d = d.child_by_field_name("declarator")
            name = d.child_by_field_name("declarator") if d is not None else None
            if name is not None:
                words = {text(w) for w in walk(n) if w.type in ("identifier", "namespace_identifier",
                                                                 "type_identifier", "type_qualifier")}
                bodies[text(name)] = words
    found = {f for f, words in bodies.items() if any(SYNC.match(w) or SPIN.match(w) or w == BARRIER for w in words)}
    while True:
        more = {f for f, words in bodies.items() if f not in found and words & found}
        if not more:
            return found
        found |= more


@dataclass(frozen=True)
class FileFacts:
    """What the file tells every kernel's check: its functions that reach a warp collective, a barrier or a spin-wait;
    the words its macros use; whether a function of it takes a reference (a call may change its argument)."""

    syncing: set
    macro_words: set
    by_reference: bool


def file_facts(root) -> FileFacts | None:
    """The file's facts, or None when no kernel of it gets a twin (a header of its own, a macro hiding a barrier)."""
    if any(n.type == "preproc_include" and n.child_by_field_name("path") is not None and
           n.child_by_field_name("path").type == "string_literal" for n in walk(root)):
        return None
    macro_words = set()
    for n in walk(root):
        if n.type in ("preproc_def", "preproc_function_def") and n.child_by_field_name("value") is not None:
            macro_words |= {w.decode() for w in _WORD.findall(n.child_by_field_name("value").text)}
    if any(SYNC.match(w) or SPIN.match(w) or w == BARRIER for w in macro_words):
        return None
    by_reference = any(n.type == "parameter_declaration" and any(c.type == "reference_declarator" for c in n.children)
                       for n in walk(root))
    return FileFacts(syncing(root), macro_words, by_reference)
