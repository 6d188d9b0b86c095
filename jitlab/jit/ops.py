"""Operators a snippet registers with torch's dispatcher (``TORCH_LIBRARY`` and its kin): read and wrapped.

A snippet whose host code holds ``TORCH_LIBRARY(ns, m) { m.def("...") }``, ``TORCH_LIBRARY_FRAGMENT``,
``TORCH_LIBRARY_IMPL(ns, CPU, m)`` or their stable-ABI forms (``STABLE_TORCH_LIBRARY*``) is an
*operator snippet*: Python calls it through ``torch.ops.<ns>.<op>``, so it gets no pybind module and
is loaded as a plain shared library that can be unloaded again (:mod:`jitlab.jit.oplib`).

Torch's macros register in a static initializer, where an error (a bad schema, a kernel whose
signature does not match it, a namespace someone else owns) can only end the process. So each unit
that registers gets :func:`prelude` first: it redefines the macros to *queue* the same registration,
and the generated :data:`REGISTRY` unit runs the queue from ``jitlab_ops_register()`` (errors come back
as text) and undoes it from ``jitlab_ops_unregister()`` (the ``torch::Library`` objects destroyed in
reverse order), so unloading never depends on the dynamic loader running destructors.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace

from jitlab.jit.plan import Operator, Unit
from jitlab.jit.parse import SourceFile, syntax_tree

DEFINING = ("TORCH_LIBRARY", "TORCH_LIBRARY_FRAGMENT", "STABLE_TORCH_LIBRARY", "STABLE_TORCH_LIBRARY_FRAGMENT")
MACROS = frozenset({*DEFINING, "TORCH_LIBRARY_IMPL", "STABLE_TORCH_LIBRARY_IMPL"})
#: Why an operator snippet's other host functions are not bound to Python.
NOT_BOUND = ("not an operator: this snippet registers operators (TORCH_LIBRARY), which Python calls through "
             "torch.ops; register it with m.def/m.impl to call it")


@dataclass(frozen=True)
class Block:
    """One registration block: ``TORCH_LIBRARY_IMPL(myops, CUDA, m) { ... }``.

    Attributes:
        macro: The macro (``TORCH_LIBRARY``, ``STABLE_TORCH_LIBRARY_IMPL``, ...).
        namespace: The operator namespace (``myops``).
        key: The dispatch key of an ``_IMPL`` block (``CPU``, ``CUDA``), else ``""``.
        path: The file.
        line: 1-based line of the macro.
        defs: ``(schema or name, line)`` for each ``m.def(...)``.
        impls: ``(operator, function)`` for each kernel given: each ``m.impl("name", &f)``, and each
            ``m.def`` with a function (a kernel for every device); ``function`` is ``""`` when not a name.
    """

    macro: str
    namespace: str
    key: str
    path: str
    line: int
    defs: tuple[tuple[str, int], ...] = ()
    impls: tuple[tuple[str, str], ...] = ()

    @property
    def defines(self) -> bool:
        return self.macro in DEFINING


@functools.lru_cache(maxsize=256)
def _blocks_of(path: str, text: str) -> tuple[Block, ...]:
    out = []
    for node in _descendants(syntax_tree(text.encode("utf-8", "surrogateescape")).root_node, "function_definition"):
        decl = node.child_by_field_name("declarator")
        name = decl.child_by_field_name("declarator") if decl is not None and decl.type == "function_declarator" else None
        if name is None or name.text.decode("utf-8", "surrogateescape") not in MACROS:
            continue
        args = [p.text.decode("utf-8", "surrogateescape").strip() for p in decl.child_by_field_name("parameters").named_children]
        macro = name.text.decode("utf-8", "surrogateescape")
        defs, impls = [], []
        for call in _descendants(node.child_by_field_name("body"), "call_expression"):
            fn, arguments = call.child_by_field_name("function"), call.child_by_field_name("arguments")
            first = arguments.named_children[0] if arguments is not None and arguments.named_children else None
            if fn is None or fn.type != "field_expression" or first is None:
                continue
            method, literal = fn.child_by_field_name("field").text.decode("utf-8", "surrogateescape"), _string(first)
            if literal is not None and method == "def":
                defs.append((literal, call.start_point[0] + 1))
            if literal is not None and (method == "impl" or (method == "def" and len(arguments.named_children) > 1)):
                names = [n.text.decode("utf-8", "surrogateescape") for a in arguments.named_children[1:] for n in _descendants(a, "identifier")]
                impls.append((_op_name(literal), names[-1] if names else ""))
        out.append(Block(macro, args[0] if args else "", args[1] if "IMPL" in macro and len(args) > 2 else "",
                         path, node.start_point[0] + 1, tuple(defs), tuple(impls)))
    return tuple(sorted(out, key=lambda b: b.line))


def blocks(f: SourceFile) -> tuple[Block, ...]:
    """The registration blocks of one file, in file order."""
    if "TORCH_LIBRARY" not in f.text:
        return ()
    return _blocks_of(str(f.path), f.text)


def operators(files: list[SourceFile]) -> list[Operator]:
    """Every operator the files define or implement, definitions first, with the keys given kernels."""
    found: dict[tuple[str, str], Operator] = {}
    every = [b for f in files for b in blocks(f)]
    for b in every:
        for schema, line in b.defs:
            found.setdefault((b.namespace, _op_name(schema)), Operator(b.namespace, _op_name(schema), schema, (), b.path, line))
    for b in every:
        for name, _ in b.impls:
            op = found.setdefault((b.namespace, name), Operator(b.namespace, name, "", (), b.path, b.line))
            key = b.key or "any device"
            if key not in op.keys:
                found[(b.namespace, name)] = replace(op, keys=(*op.keys, key))
    return list(found.values())


def _op_name(schema: str) -> str:
    """``scale`` of ``scale.out(Tensor x, *, Tensor(a!) out) -> Tensor(a!)`` (or of ``myops::scale``)."""
    return schema.split("(")[0].split("::")[-1].split(".")[0].strip()


def role(function: str, files: list[SourceFile]) -> str:
    """Why an operator snippet's host function is not an attribute: the kernel it is, or :data:`NOT_BOUND`."""
    uses = [f"{b.key or 'catch-all'} kernel of {b.namespace}::{op}"
            for f in files for b in blocks(f) for op, fn in b.impls if fn == function]
    return f"the {', '.join(uses)}: call it through torch.ops" if uses else NOT_BOUND


def prelude(f: SourceFile) -> str:
    """What goes before a registering file's code: torch's macros redefined to queue their registration."""
    marks = blocks(f)
    if not marks:
        return ""
    text = _PRELUDE
    if any(b.macro.startswith("STABLE_") for b in marks):
        text += _STABLE_PRELUDE
    return text


def registry_unit() -> Unit:
    """The generated unit that runs and undoes the queued registrations (plain C++, no torch headers)."""
    return Unit("jitlab_ops.cpp", "cxx", REGISTRY, own=True)


def _string(node) -> str | None:
    """The value of a string literal (or adjacent literals), or ``None`` for anything else."""
    if node.type == "string_literal":
        return "".join(c.text.decode("utf-8", "surrogateescape") for c in node.named_children if c.type in ("string_content", "escape_sequence"))
    if node.type == "concatenated_string":
        parts = [_string(c) for c in node.named_children]
        return None if any(p is None for p in parts) else "".join(parts)
    return None


def _descendants(node, kind: str):
    stack = [node] if node is not None else []
    while stack:
        n = stack.pop()
        if n.type == kind:
            yield n
        else:
            stack.extend(reversed(n.named_children))


# The queue both sides share: each entry makes one library object (running the block's body into it)
# and returns it type-erased; destroying it removes that block's registrations.
_QUEUE = """\
#include <functional>
#include <memory>
#include <vector>
namespace jitlab_ops {
using Make = std::function<std::shared_ptr<void>()>;
std::vector<Make>& queue();
struct Queued { explicit Queued(Make make) { queue().push_back(std::move(make)); } };
}  // namespace jitlab_ops
"""

_PRELUDE = _QUEUE + """\
#include <torch/library.h>
#undef TORCH_LIBRARY
#undef TORCH_LIBRARY_FRAGMENT
#undef _TORCH_LIBRARY_FRAGMENT
#undef TORCH_LIBRARY_IMPL
#undef _TORCH_LIBRARY_IMPL
#define JITLAB_QUEUE_LIBRARY(kind, ns, key, init, var) \\
  static void init(torch::Library&); \\
  static const ::jitlab_ops::Queued var([] { \\
    auto lib = std::make_shared<torch::Library>(torch::Library::kind, #ns, key, __FILE__, __LINE__); \\
    init(*lib); \\
    return std::shared_ptr<void>(lib); }); \\
  void init(torch::Library&
// Holds an operator's dispatcher entry for the rest of the process (jitlab.jit.oplib calls it before
// registering), so a reload never frees the entry a call in flight on another thread is reading.
extern "C" __attribute__((weak, visibility("default"))) void jitlab_ops_hold(const char* name, const char* overload) {
  static auto* held = new std::vector<c10::RegistrationHandleRAII>();  // never destroyed: never released
  held->push_back(c10::Dispatcher::singleton().registerName(c10::OperatorName(name, overload)));
}
#define TORCH_LIBRARY(ns, m) JITLAB_QUEUE_LIBRARY(DEF, ns, std::nullopt, \\
  TORCH_LIBRARY_init_##ns, TORCH_LIBRARY_static_init_##ns) m)
#define TORCH_LIBRARY_FRAGMENT(ns, m) _TORCH_LIBRARY_FRAGMENT(ns, m, C10_UID)
#define _TORCH_LIBRARY_FRAGMENT(ns, m, uid) JITLAB_QUEUE_LIBRARY(FRAGMENT, ns, std::nullopt, \\
  C10_CONCATENATE(TORCH_LIBRARY_FRAGMENT_init_##ns##_, uid), \\
  C10_CONCATENATE(TORCH_LIBRARY_FRAGMENT_static_init_##ns##_, uid)) m)
#define TORCH_LIBRARY_IMPL(ns, k, m) _TORCH_LIBRARY_IMPL(ns, k, m, C10_UID)
#define _TORCH_LIBRARY_IMPL(ns, k, m, uid) JITLAB_QUEUE_LIBRARY(IMPL, ns, \\
  std::make_optional(c10::DispatchKey::k), C10_CONCATENATE(TORCH_LIBRARY_IMPL_init_##ns##_##k##_, uid), \\
  C10_CONCATENATE(TORCH_LIBRARY_IMPL_static_init_##ns##_##k##_, uid)) m)
"""

_STABLE_PRELUDE = """\
#include <torch/csrc/stable/library.h>
#undef STABLE_TORCH_LIBRARY
#undef STABLE_TORCH_LIBRARY_FRAGMENT
#undef _STABLE_TORCH_LIBRARY_FRAGMENT
#undef STABLE_TORCH_LIBRARY_IMPL
#undef _STABLE_TORCH_LIBRARY_IMPL
#define JITLAB_QUEUE_STABLE(kind, ns, key, init, var) \\
  static void init(torch::stable::detail::StableLibrary&); \\
  static const ::jitlab_ops::Queued var([] { \\
    auto lib = std::make_shared<torch::stable::detail::StableLibrary>( \\
        torch::stable::detail::StableLibrary::Kind::kind, #ns, key, __FILE__, __LINE__); \\
    init(*lib); \\
    return std::shared_ptr<void>(lib); }); \\
  void init(torch::stable::detail::StableLibrary&
#define STABLE_TORCH_LIBRARY(ns, m) JITLAB_QUEUE_STABLE(DEF, ns, nullptr, \\
  STABLE_TORCH_LIBRARY_init_##ns, STABLE_TORCH_LIBRARY_static_init_##ns) m)
#define STABLE_TORCH_LIBRARY_FRAGMENT(ns, m) _STABLE_TORCH_LIBRARY_FRAGMENT(ns, m, C10_UID)
#define _STABLE_TORCH_LIBRARY_FRAGMENT(ns, m, uid) JITLAB_QUEUE_STABLE(FRAGMENT, ns, nullptr, \\
  C10_CONCATENATE(STABLE_TORCH_LIBRARY_FRAGMENT_init_##ns##_, uid), \\
  C10_CONCATENATE(STABLE_TORCH_LIBRARY_FRAGMENT_static_init_##ns##_, uid)) m)
#define STABLE_TORCH_LIBRARY_IMPL(ns, k, m) _STABLE_TORCH_LIBRARY_IMPL(ns, k, m, C10_UID)
#define _STABLE_TORCH_LIBRARY_IMPL(ns, k, m, uid) JITLAB_QUEUE_STABLE(IMPL, ns, #k, \\
  C10_CONCATENATE(STABLE_TORCH_LIBRARY_IMPL_init_##ns##_##k##_, uid), \\
  C10_CONCATENATE(STABLE_TORCH_LIBRARY_IMPL_static_init_##ns##_##k##_, uid)) m)
"""

#: The generated registry: runs the queue (definitions and implementations, in the link's order; the
#: dispatcher takes either first), stops at the first error and undoes what it did, returning the text.
REGISTRY = _QUEUE + """\
#include <cstring>
#include <exception>
namespace jitlab_ops {
std::vector<Make>& queue() { static std::vector<Make> q; return q; }
static std::vector<std::shared_ptr<void>> registered;
}  // namespace jitlab_ops

extern "C" void jitlab_ops_unregister() {
  auto& r = jitlab_ops::registered;
  while (!r.empty()) r.pop_back();  // newest first
}

extern "C" int jitlab_ops_register(char* error, unsigned long size) {
  jitlab_ops_unregister();
  try {
    for (auto& make : jitlab_ops::queue()) jitlab_ops::registered.push_back(make());
    return 0;
  } catch (const std::exception& e) {
    std::strncpy(error, e.what(), size - 1);
  } catch (...) {
    std::strncpy(error, "unknown C++ exception", size - 1);
  }
  error[size - 1] = 0;
  jitlab_ops_unregister();
  return 1;
}
"""
