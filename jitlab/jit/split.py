"""Split a torch-style ``.cu`` file into a device unit (nvcc, no torch) and a host unit (c++, torch).

Why: nvcc spends 35-39 s parsing torch's headers for a file that includes them, and ~1.4 s without.
So the kernels go to a **device unit** that nvcc compiles without torch, and the host functions go to
a **host unit** that the host compiler compiles against a precompiled torch header. An edit to a kernel
body recompiles the device unit only.

Both units are the user's file, byte for byte, with some regions blanked (replaced by spaces, newlines
kept) and a few words inserted, so every line keeps its number and the ``#line`` directive makes the
compiler name the user's file and line in either unit:

============================  ==========================  ===========================================
top-level item                device unit                 host unit
============================  ==========================  ===========================================
``__global__`` kernel         kept (``static`` dropped)   declaration: body → ``;`` (links to the stub)
``__device__`` function       kept                        blanked
``__host__ __device__``       kept                        kept, made ``inline`` (one definition wins)
host function                 blanked (unless constexpr)  kept; ``k<<<g, b, s, st>>>(args)`` rewritten
``__constant__``/``__device__``  kept (``static`` dropped)   ``extern`` declaration, no initializer
variable
types, macros, other includes kept                        kept
torch includes, torch-using   blanked (the standard       kept
declarations, PYBIND11_MODULE headers torch's gave kernels
                              come first instead)
============================  ==========================  ===========================================

A launch becomes ``::jitlab_rt::launch(k, g, b, s, st)(args)``: the host unit's launcher converts the
arguments to the kernel's parameter types and calls ``cudaLaunchKernel`` with the kernel's host stub,
which the device unit defines, exactly as nvcc's own lowering of ``<<<...>>>`` does. Template kernels
are declared in the host unit; the instantiations it names are found in its object file and
instantiated in the device unit (``objects.instantiations``).

What cannot be split correctly is never split: :func:`split` returns a reason and the file is built
as one unit, as plain ``load_inline`` would.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import tree_sitter as ts

from jitlab.jit.parse import TORCH_INCLUDE_PREFIXES, TORCH_NAMESPACES, SourceFile, line_directive, syntax_tree

#: What the host unit needs before the user's code (after the precompiled torch header).
HOST_PRELUDE = (Path(__file__).parent / "split_host_prelude.h").read_text(encoding="utf-8")

#: What the device unit needs before the user's code.
DEVICE_PRELUDE = "#include <cuda_runtime.h>\n#include <cassert>\n"
#: What a file's torch includes give its kernels and no other include of the device unit does: blanking
#: ``<torch/extension.h>`` must not take ``FLT_MAX``, ``INT_MAX`` or ``std::numeric_limits`` from code
#: that torch's ``load_inline`` builds (4 of KernelBench's 383 leaderboard solutions use ``FLT_MAX`` so).
TORCH_DEVICE_PRELUDE = "#include <cfloat>\n#include <climits>\n#include <limits>\n"

_CUDA_VARIABLE = frozenset({"__constant__", "__device__", "__managed__", "__shared__"})
_FUNCTION_MACROS = frozenset({"PYBIND11_MODULE", "TORCH_LIBRARY", "TORCH_LIBRARY_IMPL", "TORCH_LIBRARY_FRAGMENT"})
_TYPES = frozenset({"struct_specifier", "class_specifier", "union_specifier", "enum_specifier", "type_definition",
                    "alias_declaration", "using_declaration", "namespace_alias_definition",
                    "static_assert_declaration", "concept_definition"})
_PASSIVE = frozenset({"preproc_def", "preproc_function_def", "preproc_call", "comment", ";"})


@dataclass
class Split:
    """The two units of one file, or why it cannot be split.

    Attributes:
        device: The device unit's text (the user's file with host code blanked), ``#line`` included.
        host: The host unit's text (kernels as declarations, launches rewritten), ``#line`` included.
        kernels: Qualified names of the file's kernels.
        templates: Qualified names of its kernel templates (instantiated from what the host unit names).
        launches: How many ``<<<...>>>`` launches were rewritten.
        reason: Why the file must be built as one unit; ``None`` when the split is sound.
    """

    device: str = ""
    host: str = ""
    kernels: list[str] = field(default_factory=list)
    templates: set[str] = field(default_factory=set)
    launches: int = 0
    reason: str | None = None


class Unsplittable(Exception):
    """Raised inside the walk with the one-line reason the file stays one unit."""


def split(f: SourceFile, header_texts: dict[str, str] | None = None) -> Split:
    """Split a torch-using CUDA file into its device and host units.

    Args:
        f: The parsed file.
        header_texts: Text of the local headers it includes, by the name written in ``#include "…"``.

    Returns:
        The split; ``reason`` is set instead when the file must stay one unit.
    """
    src = f.text.encode("utf-8", "surrogateescape")
    walker = _Walker(f, src, header_texts or {})
    try:
        walker.walk(syntax_tree(src).root_node, "")
        walker.check_host_leftovers()
    except Unsplittable as e:
        return Split(reason=str(e))
    device = _apply(src, walker.device_edits)
    host = _apply(src, walker.host_edits)
    line = line_directive(f.path)
    # Trailing blank lines go, so a function added at the end leaves the other unit unchanged.
    prelude = DEVICE_PRELUDE + (TORCH_DEVICE_PRELUDE if walker.torch_included else "")
    return Split(device=prelude + line + device.rstrip() + "\n", host=HOST_PRELUDE + line + host.rstrip() + "\n",
                 kernels=walker.kernels, templates=walker.templates, launches=walker.launches)


def _blank(text: bytes) -> bytes:
    """Spaces for every byte but newlines: a word disappears, lines and columns stay."""
    return re.sub(rb"[^\n]", b" ", text)


def _drop(text: bytes) -> bytes:
    """Only the newlines of a region: later lines keep their numbers, and an edit inside the region
    that keeps its line count leaves the other unit's text (and so its cached object) unchanged."""
    return b"\n" * text.count(b"\n")


def _apply(src: bytes, edits: list[tuple[int, int, bytes]]) -> str:
    out, pos = [], 0
    for start, end, new in sorted(edits, key=lambda e: (e[0], e[1])):
        if start < pos:
            continue  # inside a region already replaced (a blanked item's own edits)
        out += [src[pos:start], new]
        pos = end
    out.append(src[pos:])
    return b"".join(out).decode("utf-8", "surrogateescape")


def _line(node: ts.Node) -> int:
    return node.start_point[0] + 1


class _Walker:
    """Walks the top level of one file and records the edits that make each unit."""

    def __init__(self, f: SourceFile, src: bytes, header_texts: dict[str, str]):
        self.f = f
        self.src = src
        self.headers = header_texts
        self.device_edits: list[tuple[int, int, bytes]] = []
        self.host_edits: list[tuple[int, int, bytes]] = []
        self.kernels: list[str] = []
        self.templates: set[str] = set()
        self.launches = 0
        self.torch_included = False  # a torch header blanked in the device unit

    # ---- where each item goes -------------------------------------------------------------------

    def walk(self, node: ts.Node, ns: str) -> None:
        skip = {id(c) for c in (node.child_by_field_name("condition"), node.child_by_field_name("name")) if c}
        for child in node.named_children:
            if id(child) in skip:
                continue
            kind = child.type
            if kind == "ERROR" or child.is_missing:
                raise Unsplittable(f"line {_line(child)} could not be parsed")
            if kind == "preproc_include":
                self._include(child)
            elif kind in ("preproc_def", "preproc_function_def"):
                if b"<<<" in child.text:
                    raise Unsplittable(f"line {_line(child)}: a kernel launch inside a macro")
            elif kind in _PASSIVE:
                continue
            elif kind.startswith("preproc_if") or kind in ("preproc_else", "preproc_elif", "preproc_elifdef",
                                                           "declaration_list"):
                self.walk(child, ns)
            elif kind == "namespace_definition":
                self._namespace(child, ns)
            elif kind == "linkage_specification":
                body = child.child_by_field_name("body")
                if body is not None and body.type == "function_definition":
                    self._function(body, child, ns)
                elif body is not None:
                    self.walk(body, ns)
            elif kind == "function_definition":
                self._function(child, child, ns)
            elif kind == "template_declaration":
                self._template(child, ns)
            elif kind == "declaration":
                self._declaration(child, child, ns)
            else:
                self._shared_or_host(child)

    def _include(self, node: ts.Node) -> None:
        path = node.child_by_field_name("path")
        target = path.text.decode("utf-8", "surrogateescape").strip('"<>') if path is not None else ""
        if target.startswith(TORCH_INCLUDE_PREFIXES):
            self._host_only(node)
            self.torch_included = True
        elif path is not None and path.type == "string_literal" and target in self.headers:
            text = self.headers[target]
            if re.search(r"__global__|__device__|__constant__", _without_comments(text)):
                raise Unsplittable(f"its header {target} holds device code, which a host unit cannot include")
            if _mentions_torch_text(text):
                self._host_only(node)
                self.torch_included = True

    def _namespace(self, node: ts.Node, ns: str) -> None:
        name = node.child_by_field_name("name")
        body = node.child_by_field_name("body")
        if name is None:
            if body is not None and _has_cuda(body):
                raise Unsplittable(f"line {_line(node)}: device code in an anonymous namespace")
            self._shared_or_host(node)
            return
        if name.text.decode("utf-8", "surrogateescape") in TORCH_NAMESPACES:
            self._host_only(node)
            return
        if body is not None:
            self.walk(body, f"{ns}{name.text.decode('utf-8', 'surrogateescape')}::")

    def _template(self, node: ts.Node, ns: str) -> None:
        inner = next((c for c in node.named_children if c.type in ("function_definition", "declaration")), None)
        if inner is None:
            self._shared_or_host(node)  # class and alias templates: types
        elif inner.type == "function_definition":
            self._function(inner, node, ns, template=True)
        else:
            self._declaration(inner, node, ns, template=True)

    def _function(self, fn: ts.Node, whole: ts.Node, ns: str, template: bool = False) -> None:
        quals = {c.type for c in fn.children if c.type in ("__global__", "__device__", "__host__")}
        name = _function_name(fn)
        if name in _FUNCTION_MACROS:
            self._host_only(whole)
        elif "__global__" in quals:
            self._kernel(fn, whole, ns, name, template)
        elif "__device__" in quals and "__host__" not in quals:
            self._device_only(whole, name)
        elif "__device__" in quals:
            self._require_torch_free(whole, f"`{name}`")
            if not template and not _has_word(fn, ("static", "inline", "constexpr", "__forceinline__")):
                self.host_edits.append((fn.start_byte, fn.start_byte, b"inline "))
        elif _has_word(fn, ("constexpr",)) and not _mentions_torch(whole):
            pass  # usable in device code (--expt-relaxed-constexpr) and inline: both units
        else:
            self._host_function(fn, whole)

    def _kernel(self, fn: ts.Node, whole: ts.Node, ns: str, name: str, template: bool) -> None:
        self._require_torch_free(whole, f"kernel `{name}`")
        for c in fn.named_children:
            if c.type == "storage_class_specifier" and c.text == b"static":
                # The host unit links to the kernel's stub, so it must not be file-local.
                self.device_edits.append((c.start_byte, c.end_byte, _blank(c.text)))
                self.host_edits.append((c.start_byte, c.end_byte, _blank(c.text)))
        body = fn.child_by_field_name("body")
        if body is not None:
            self.host_edits.append((body.start_byte, body.end_byte, b";" + _drop(body.text)))
        self.kernels.append(ns + name)
        if template:
            self.templates.add(ns + name)

    def _device_only(self, whole: ts.Node, name: str) -> None:
        self._require_torch_free(whole, f"device function `{name}`")
        self.host_edits.append((whole.start_byte, whole.end_byte, _drop(whole.text)))

    def _host_function(self, fn: ts.Node, whole: ts.Node) -> None:
        body = fn.child_by_field_name("body")
        text = _without_comments(body.text.decode("utf-8", "replace")) if body is not None else ""
        if re.search(r"\]\s*(\([^)]*\))?\s*(__device__|__host__)", text):
            raise Unsplittable(f"line {_line(fn)}: a __device__ lambda, which only nvcc compiles")
        if re.search(r"\b(thrust|cub)::", text):
            raise Unsplittable(f"line {_line(fn)}: host code calls thrust/cub, whose templates nvcc must compile")
        self.device_edits.append((whole.start_byte, whole.end_byte, _drop(whole.text)))
        self._rewrite_launches(whole)

    def _declaration(self, decl: ts.Node, whole: ts.Node, ns: str, template: bool = False) -> None:
        words = _words(decl)
        if any(_descendants(decl, "function_declarator")) and not any(_descendants(decl, "init_declarator")):
            if "__global__" in words:  # a kernel's prototype: the host unit links to its stub
                self._require_torch_free(whole, "a kernel declaration")
                for c in decl.named_children:
                    if c.type == "storage_class_specifier" and c.text == b"static":
                        self.device_edits.append((c.start_byte, c.end_byte, _blank(c.text)))
                        self.host_edits.append((c.start_byte, c.end_byte, _blank(c.text)))
            elif "__device__" in words and "__host__" not in words:
                self._device_only(whole, "declaration")
            elif _mentions_torch(whole):
                self._host_only(whole)
            return
        if words & _CUDA_VARIABLE:
            self._device_variable(decl, whole, words)
        elif ("constexpr" in words or ("const" in words and not any(_descendants(decl, "pointer_declarator")))) \
                and not _mentions_torch(whole):
            pass  # constants: both units (internal linkage, usable in kernels)
        else:
            self._host_only(whole)  # host variables: kernels cannot read them
            self._rewrite_launches(whole)

    def _device_variable(self, decl: ts.Node, whole: ts.Node, words: set[str]) -> None:
        self._require_torch_free(whole, "a device variable")
        if "__shared__" in words or "extern" in words:
            self.host_edits.append((whole.start_byte, whole.end_byte, _drop(whole.text)))
            return
        # Device unit: the definition. Host unit: `extern` declaration of the same name, which the
        # link resolves to the variable's host shadow (what cudaMemcpyToSymbol looks up).
        for c in decl.named_children:
            if c.type == "storage_class_specifier" and c.text == b"static":
                self.device_edits.append((c.start_byte, c.end_byte, _blank(c.text)))
                self.host_edits.append((c.start_byte, c.end_byte, _blank(c.text)))
            elif c.type == "init_declarator":
                value = c.child_by_field_name("value")
                inner = c.child_by_field_name("declarator")
                if value is not None and inner is not None:
                    self.host_edits.append((inner.end_byte, value.end_byte, _drop(self.src[inner.end_byte:value.end_byte])))
        self.host_edits.append((decl.start_byte, decl.start_byte, b"extern "))

    def _shared_or_host(self, node: ts.Node) -> None:
        if _mentions_torch(node):
            self._host_only(node)

    def _host_only(self, node: ts.Node) -> None:
        self.device_edits.append((node.start_byte, node.end_byte, _drop(node.text)))

    def _require_torch_free(self, node: ts.Node, what: str) -> None:
        found = _torch_name(node)
        if found:
            raise Unsplittable(f"line {_line(node)}: {what} uses torch ({found}), so nvcc must see torch's headers")

    # ---- launches ----------------------------------------------------------------------------------

    def _rewrite_launches(self, node: ts.Node) -> None:
        for call in _descendants(node, "call_expression"):
            config = next((c for c in call.children if c.type == "kernel_call_syntax"), None)
            callee = call.child_by_field_name("function")
            if config is None or callee is None:
                continue
            open_, close = config.children[0], config.children[-1]
            if open_.type != "<<<" or close.type != ">>>":
                raise Unsplittable(f"line {_line(call)}: a kernel launch that could not be read")
            self.host_edits += [
                (callee.start_byte, callee.start_byte, b"::jitlab_rt::launch("),
                (open_.start_byte, open_.end_byte, b", "),
                (close.start_byte, close.end_byte, b")"),
            ]
            self.launches += 1

    def check_host_leftovers(self) -> None:
        """A ``<<<`` the walk did not rewrite (in a macro, say) would not compile as host C++."""
        host = _apply(self.src, self.host_edits)
        m = re.search(r"<<<", _without_comments(host))
        if m:
            line = host.count("\n", 0, m.start()) + 1
            raise Unsplittable(f"line {line}: a kernel launch outside a host function")


# ---- small syntax helpers ---------------------------------------------------------------------------

def _descendants(node: ts.Node, kind: str):
    stack = [node]
    while stack:
        n = stack.pop()
        if n.type == kind:
            yield n
        stack.extend(n.named_children)


def _words(node: ts.Node) -> set[str]:
    """Qualifier and specifier words of a declaration (``static``, ``__constant__``, ``constexpr``…)."""
    out = set()
    for c in node.children:
        if c.type in ("storage_class_specifier", "type_qualifier"):
            out.add(c.text.decode("utf-8", "surrogateescape"))
        elif c.type.startswith("__") or c.type in ("constexpr", "inline", "static", "extern"):
            out.add(c.type)
    return out


def _has_word(fn: ts.Node, words: tuple[str, ...]) -> bool:
    return bool(_words(fn) & set(words))


def _function_name(fn: ts.Node) -> str:
    d = fn.child_by_field_name("declarator")
    while d is not None and d.type != "function_declarator":
        d = d.child_by_field_name("declarator") or (d.named_children[-1] if d.named_children else None)
    name = d.child_by_field_name("declarator") if d is not None else None
    if name is None:
        return "?"
    return name.text.decode("utf-8", "surrogateescape").split("<")[0].split("::")[-1]


def _has_cuda(node: ts.Node) -> bool:
    return bool(re.search(rb"__global__|__device__|__constant__", node.text))


def _torch_name(node: ts.Node) -> str:
    """The first torch namespace or macro the node names (``torch::``, ``at::``, ``using namespace at``,
    ``TORCH_CHECK``), or ``""``."""
    for n in _descendants(node, "using_declaration"):  # ``using namespace at;``: its one name is an identifier
        if n.named_children and n.named_children[0].type == "identifier":
            if (name := n.named_children[0].text.decode("utf-8", "surrogateescape")) in TORCH_NAMESPACES:
                return f"using namespace {name}"
    for n in _descendants(node, "namespace_identifier"):
        if n.text.decode("utf-8", "surrogateescape") in TORCH_NAMESPACES:
            return n.text.decode("utf-8", "surrogateescape") + "::"
    for n in _descendants(node, "identifier"):
        t = n.text.decode("utf-8", "surrogateescape")
        if t.startswith(("TORCH_", "AT_", "C10_")):
            return t
    return ""


def _mentions_torch(node: ts.Node) -> bool:
    return bool(_torch_name(node))


def _mentions_torch_text(text: str) -> bool:
    text = _without_comments(text)
    return bool(re.search(r"#\s*include\s*[<\"](torch|ATen|c10|pybind11|caffe2)/|\b(torch|at|c10|pybind11)::", text))


def _without_comments(text: str) -> str:
    return re.sub(r"//[^\n]*|/\*.*?\*/", " ", text, flags=re.S)


def header_texts(f: SourceFile, include_dirs: list[str]) -> dict[str, str]:
    """The local headers ``f`` includes, by the name as written (first match in its folder, then ``include_dirs``)."""
    out = {}
    for inc in f.local_includes:
        for d in [f.path.parent, *map(Path, include_dirs)]:
            cand = d / inc
            if cand.is_file():
                out[inc] = cand.read_text(encoding="utf-8", errors="replace")
                break
    return out
