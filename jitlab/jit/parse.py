"""Snippet parsing: a `.cu`/`.cpp` file → its kernels, host functions, includes and bindings.

Uses tree-sitter-cuda (a real CUDA/C++ grammar) so signatures with templates, qualifiers,
``__launch_bounds__``, namespaces, ``extern "C"`` blocks and preprocessor conditionals are read
the way a compiler reads them. Nothing here compiles or runs anything.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from pathlib import Path

import tree_sitter as ts
import tree_sitter_cuda

from jitlab.config import CPP_EXTS, CUDA_EXTS, HEADER_EXTS
from jitlab.errors import SnippetError
from jitlab.jit import preproc

#: Headers whose presence makes a file torch-style (it needs torch's headers to compile).
TORCH_INCLUDE_PREFIXES = ("torch/", "ATen/", "c10/", "pybind11/", "caffe2/")
TORCH_NAMESPACES = frozenset({"torch", "at", "c10", "pybind11", "py"})
CUDA_QUALIFIERS = frozenset({"__global__", "__device__", "__host__"})
#: The UTF-8 byte-order mark, which some Windows editors put at the start of a file.
BOM = "\ufeff"
#: Specifiers that make a function a helper of the snippet's own code (internal linkage, or inline
#: or compile-time only): it is never exported to Python, in either kind of snippet.
INTERNAL_SPECIFIERS = ("static", "inline", "__inline__", "__forceinline__", "constexpr", "consteval")


@dataclass(frozen=True)
class Param:
    """One function parameter, as written and normalized.

    Attributes:
        name: The parameter's name (``arg<i>`` when unnamed).
        text: The declaration exactly as written (``const float* __restrict__ x``).
        base: The base type with whitespace normalized (``float``, ``unsigned int``, ``__half``).
        pointer: Pointer depth; an array parameter counts as one.
        const: Whether the pointee (or value) is ``const``.
        reference: Whether declared as a reference (``T&``).
        default: The default argument as written (``3``, ``-1.5f``, ``nullptr``), or ``None``.
        function: Whether it is a function pointer or reference (``void (*k)(int*, int)``).
    """

    name: str
    text: str
    base: str
    pointer: int = 0
    const: bool = False
    reference: bool = False
    default: str | None = None
    function: bool = False

    @property
    def ctype(self) -> str:
        """The type as C would print it: ``const float*``."""
        return ("const " if self.const else "") + self.base + "*" * self.pointer + ("&" if self.reference else "")


@dataclass(frozen=True)
class Function:
    """A ``__global__`` kernel or a host function defined in a snippet.

    Attributes:
        name: The unqualified name, used as the Python attribute.
        qualname: The C++ name with namespaces (``ns::kernel``).
        kind: ``"global"`` for kernels, ``"host"`` for host functions.
        returns: The return type as written.
        params: The parameters.
        path: The file that defines it.
        line: 1-based line of the definition.
        internal: What makes it a helper of the snippet's own code rather than a function to call
            from Python: ``"static"``, ``"inline"``, ``"constexpr"``, ``"consteval"`` or
            ``"anonymous namespace"``; ``""`` for an exported candidate.
        template: Declared as a template (cannot be launched without instantiation).
        params_text: The parameter list as written, parentheses included.
        calls: Names of the functions and kernels its body calls (launches included).
        prints: Whether its body calls ``printf`` itself.
        guard: The ``#if`` condition it is compiled under (``defined(FAST)``), or ``""`` (:mod:`jitlab.jit.preproc`).
    """

    name: str
    qualname: str
    kind: str
    returns: str
    params: tuple[Param, ...]
    path: str
    line: int
    internal: str = ""
    template: bool = False
    params_text: str = "()"
    calls: tuple[str, ...] = ()
    prints: bool = False
    guard: str = ""

    @property
    def static(self) -> bool:
        """Whether it is internal to the snippet (:attr:`internal`): never exported or bound."""
        return bool(self.internal)

    def signature(self) -> str:
        """A C++ declaration of the function: ``torch::Tensor f(torch::Tensor x)``."""
        prefix = "__global__ " if self.kind == "global" else ""
        return f"{prefix}{self.returns} {self.qualname}{self.params_text}"


@dataclass
class SourceFile:
    """One parsed snippet file.

    Attributes:
        path: Absolute path of the file.
        text: Its contents.
        language: ``"cuda"``, ``"cpp"`` or ``"header"``.
        functions: Kernels and host functions defined at namespace scope, in file order.
        local_includes: ``#include "..."`` targets, as written.
        system_includes: ``#include <...>`` targets, as written (a user's include folder may hold them).
        uses_torch: Whether the file needs torch headers (includes them or names torch types).
        pybind_module: ``(name, start_byte, end_byte)`` of the first ``PYBIND11_MODULE`` argument.
        pybind_defs: Python name → C++ function for each ``m.def("name", &function)`` in it.
        has_printf: Whether the file calls ``printf`` (its output is forwarded to Python).
        parse_error: ``(line, column)`` of the first syntax error tree-sitter found, if any.
        has_main: Whether it defines ``main``: a whole program (:mod:`jitlab.jit.engines.program` builds it).
    """

    path: Path
    text: str
    language: str
    functions: list[Function] = field(default_factory=list)
    local_includes: list[str] = field(default_factory=list)
    system_includes: list[str] = field(default_factory=list)
    uses_torch: bool = False
    pybind_module: tuple[str, int, int] | None = None
    pybind_defs: dict[str, str] = field(default_factory=dict)
    has_printf: bool = False
    parse_error: tuple[int, int] | None = None
    has_main: bool = False


@functools.cache
def _parser() -> ts.Parser:
    return ts.Parser(ts.Language(tree_sitter_cuda.language()))


def syntax_tree(src: bytes) -> ts.Tree:
    """The tree-sitter-cuda syntax tree of a source text (for passes that rewrite it, like the splitter)."""
    return _parser().parse(src)


def language_of(path: Path) -> str:
    """Classify a file by extension: ``cuda``, ``cpp`` or ``header``.

    Raises:
        SnippetError: For an extension jitlab does not build.
    """
    ext = path.suffix.lower()
    if ext in CUDA_EXTS:
        return "cuda"
    if ext in CPP_EXTS:
        return "cpp"
    if ext in HEADER_EXTS:
        return "header"
    raise SnippetError(
        f"{path}: jitlab builds .cu, .cpp, .cc and .cxx files (headers .h/.cuh/.hpp are included, not built); "
        f"rename the file or pass the folder that holds it"
    )


def parse_file(path: str | Path, text: str | None = None) -> SourceFile:
    """Parse one snippet file.

    Args:
        path: The file's path; its extension picks CUDA or C++.
        text: The contents, if already read.

    Returns:
        The parsed file.

    Raises:
        SnippetError: If the file is missing or not text.
    """
    path = Path(path).resolve()
    return _parse(path, read_source(path) if text is None else text, language_of(path))


def parse_header(path: str | Path, text: str | None = None) -> SourceFile:
    """Parse an included header (any extension, ``.inc`` or none included) for what it includes.

    Raises:
        SnippetError: If the file is missing or not text.
    """
    path = Path(path).resolve()
    return _parse(path, read_source(path) if text is None else text, "header")


def read_source(path: Path) -> str:
    """A source file's text, without the UTF-8 byte-order mark some editors write (the file is left as is).

    Compilers skip a BOM at the start of a file they open, but not in the middle of the generated
    unit the text is copied into (after a ``#line`` directive), where it is a stray character.

    Raises:
        SnippetError: If the file is missing, naming the fix.
    """
    if not path.is_file():
        raise SnippetError(f"{path}: no such file; check the path (relative paths start at {Path.cwd()})")
    # Bytes that are not UTF-8 (a comment saved in GBK or Latin-1) are kept as they are, as the compiler
    # gets them from torch's build: decoded as lone surrogates and written back byte for byte.
    return path.read_text(encoding="utf-8", errors="surrogateescape").removeprefix(BOM)


def line_directive(path: str | Path, line: int = 1) -> str:
    """``#line 1 "<path>"`` and a newline: the code after it is reported at ``path``'s line ``line``.

    The name is a C string literal, so a backslash, a double quote or a newline in a folder's name is
    escaped; compilers print the name unescaped, as the file system has it.
    """
    name = str(path).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'#line {line} "{name}"\n'


def _parse(path: Path, text: str, language: str) -> SourceFile:
    text = text.removeprefix(BOM)
    src = text.encode("utf-8", "surrogateescape")
    tree = _parser().parse(src)
    out = SourceFile(path=path, text=text, language=language)
    _Walker(out, src).walk(tree.root_node, namespace="", extern_c=False, anonymous=False, guard="")
    if tree.root_node.has_error:
        out.parse_error = _first_error(tree.root_node)
    return out


class _Walker:
    """Collects functions, includes and torch usage from one syntax tree."""

    def __init__(self, out: SourceFile, src: bytes):
        self.out = out
        self.src = src

    def walk(self, node: ts.Node, namespace: str, extern_c: bool, anonymous: bool, guard: str,
             children: list[ts.Node] | None = None) -> None:
        """Record what ``node``'s children (or ``children``) define, in an anonymous namespace or not, under ``guard``."""
        for child in node.named_children if children is None else children:
            kind = child.type
            if kind == "preproc_include":
                self._include(child)
            elif kind == "function_definition":
                self._function(child, namespace, template=False, anonymous=anonymous, guard=guard)
            elif kind == "template_declaration":
                for sub in child.named_children:
                    if sub.type == "function_definition":
                        self._function(sub, namespace, template=True, anonymous=anonymous, guard=guard)
                self._scan_torch(child)
            elif kind == "namespace_definition":
                name_node = child.child_by_field_name("name")
                ns = name_node.text.decode("utf-8", "surrogateescape") if name_node else ""
                body = child.child_by_field_name("body")
                if ns in TORCH_NAMESPACES:
                    self.out.uses_torch = True
                if body is not None:
                    self.walk(body, f"{namespace}{ns}::" if ns else namespace, extern_c, anonymous or not ns, guard)
            elif kind == "linkage_specification":
                body = child.child_by_field_name("body")
                if body is not None:
                    if body.type == "function_definition":
                        self._function(body, namespace, template=False, anonymous=anonymous, guard=guard)
                    else:
                        self.walk(body, namespace, True, anonymous, guard)
            elif kind in preproc.CONDITIONALS:  # each branch under its guard (#if A: A; #else: !(A))
                for children, branch in preproc.branches(child, guard):
                    self.walk(child, namespace, extern_c, anonymous, branch, children)
            elif kind == "declaration_list":
                self.walk(child, namespace, extern_c, anonymous, guard)
            else:
                self._scan_torch(child)

    def _include(self, node: ts.Node) -> None:
        path = node.child_by_field_name("path")
        if path is None:
            return
        text = path.text.decode("utf-8", "surrogateescape")
        if path.type == "string_literal":
            self.out.local_includes.append(text.strip('"'))
            target = text.strip('"')
        else:
            target = text.strip("<>")
            self.out.system_includes.append(target)
        if target.startswith(TORCH_INCLUDE_PREFIXES):
            self.out.uses_torch = True

    def _scan_torch(self, node: ts.Node) -> None:
        """Mark torch usage and printf calls anywhere under ``node``."""
        stack = [node]
        while stack:
            n = stack.pop()
            t = n.type
            if t == "namespace_identifier" and n.text.decode("utf-8", "surrogateescape") in TORCH_NAMESPACES:
                self.out.uses_torch = True
            elif t == "call_expression":
                fn = n.child_by_field_name("function")
                if fn is not None and fn.type == "identifier" and fn.text in (b"printf", b"fprintf", b"puts"):
                    self.out.has_printf = True
            stack.extend(n.named_children)

    def _function(self, node: ts.Node, namespace: str, template: bool, anonymous: bool, guard: str = "") -> None:
        self._scan_torch(node)
        qualifiers = {c.type for c in node.children if c.type in CUDA_QUALIFIERS}
        declarator = node.child_by_field_name("declarator")
        stars = ""
        while declarator is not None and declarator.type in ("pointer_declarator", "reference_declarator"):
            stars += "*" if declarator.type == "pointer_declarator" else "&"
            declarator = declarator.child_by_field_name("declarator") or (
                declarator.named_children[-1] if declarator.named_children else None
            )
        if declarator is None or declarator.type != "function_declarator":
            return
        name_node = declarator.child_by_field_name("declarator")
        if name_node is None:
            return
        name = name_node.text.decode("utf-8", "surrogateescape")
        if name == "PYBIND11_MODULE":
            self._pybind(declarator)
            return
        if name.startswith(("TORCH_LIBRARY", "STABLE_TORCH_LIBRARY")):
            return  # an operator registration block (jitlab.jit.ops reads it), not a function
        if "__device__" in qualifiers and "__host__" not in qualifiers and "__global__" not in qualifiers:
            return  # device helper: called from kernels only
        self.out.has_main |= name == "main" and not namespace and not template
        if name_node.type not in ("identifier",) or name == "main":
            return  # methods, operators, destructors, main()
        type_node = node.child_by_field_name("type")
        type_quals = [c.text.decode("utf-8", "surrogateescape") for c in node.named_children
                      if c.type == "type_qualifier" and c.text.decode("utf-8", "surrogateescape") not in INTERNAL_SPECIFIERS]
        returns = " ".join(type_quals + [_squash(type_node.text.decode("utf-8", "surrogateescape")) if type_node else "int"]) + stars
        params_node = declarator.child_by_field_name("parameters")
        params = tuple(parameters(params_node)) if params_node is not None else ()
        calls = _called_names(node.child_by_field_name("body"))
        self.out.functions.append(
            Function(
                name=name,
                qualname=namespace + name,
                kind="global" if "__global__" in qualifiers else "host",
                returns=returns,
                params=params,
                path=str(self.out.path),
                line=node.start_point[0] + 1,
                internal="anonymous namespace" if anonymous else _internal_specifier(node),
                template=template,
                params_text=params_node.text.decode("utf-8", "surrogateescape") if params_node is not None else "()",
                calls=tuple(sorted(calls - PRINT_FUNCTIONS)),
                prints=bool(calls & PRINT_FUNCTIONS),
                guard=guard,
            )
        )

    def _pybind(self, declarator: ts.Node) -> None:
        self.out.uses_torch = True
        body = declarator.parent.child_by_field_name("body") if declarator.parent is not None else None
        for call in _descendants(body, "call_expression"):
            fn = call.child_by_field_name("function")
            args = call.child_by_field_name("arguments")
            real = [a for a in args.named_children if a.type != "comment"] if args is not None else []
            if fn is None or not fn.text.decode("utf-8", "surrogateescape").endswith(".def") or len(real) < 2:
                continue
            name, target = real[0], real[1]
            if name.type == "string_literal":
                ids = [target] if target.type == "identifier" else list(_descendants(target, "identifier"))
                if ids:
                    self.out.pybind_defs[name.text.decode("utf-8", "surrogateescape").strip('"')] = ids[-1].text.decode("utf-8", "surrogateescape")
        params = declarator.child_by_field_name("parameters")
        if params is None or not params.named_children or self.out.pybind_module is not None:
            return
        first = params.named_children[0]
        self.out.pybind_module = (first.text.decode("utf-8", "surrogateescape"), first.start_byte, first.end_byte)


def _internal_specifier(node: ts.Node) -> str:
    """The first specifier of a function definition that keeps it internal (``static``, ``constexpr``, …), or ``""``.

    tree-sitter-cuda files ``static``/``inline`` as storage classes, ``constexpr``/``consteval`` as
    type qualifiers and ``__forceinline__`` as a token of its own: each is one child of the
    definition, before its declarator.
    """
    declarator = node.child_by_field_name("declarator")
    for c in node.children:
        if declarator is not None and c.start_byte >= declarator.start_byte:
            break
        word = c.text.decode("utf-8", "surrogateescape")
        if word in INTERNAL_SPECIFIERS:
            return "inline" if word.startswith("__") else word  # __inline__, __forceinline__
    return ""


PRINT_FUNCTIONS = frozenset({"printf", "fprintf", "puts", "putchar", "fputs"})


def _descendants(node: ts.Node | None, kind: str):
    stack = [node] if node is not None else []
    while stack:
        n = stack.pop()
        if n.type == kind:
            yield n
        stack.extend(n.named_children)


def _called_names(body: ts.Node | None) -> set[str]:
    """Identifiers called in a body: functions, kernel launches (``k<<<g, b>>>(…)``) and printf."""
    names = set()
    for call in _descendants(body, "call_expression"):
        fn = call.child_by_field_name("function")
        if fn is not None and fn.type in ("identifier", "qualified_identifier", "template_function"):
            names.add(fn.text.decode("utf-8", "surrogateescape").split("<")[0].split("::")[-1])
    return names


def parameters(node: ts.Node):
    """The parameters of a ``parameter_list`` node, as :class:`Param`."""
    named = [c for c in node.named_children if c.type in ("parameter_declaration", "optional_parameter_declaration")]
    if len(named) == 1 and named[0].text.decode("utf-8", "surrogateescape").strip() == "void":
        return
    for i, p in enumerate(named):
        type_node = p.child_by_field_name("type")
        base = _squash(type_node.text.decode("utf-8", "surrogateescape")) if type_node is not None else "int"
        const = any(c.type == "type_qualifier" and c.text == b"const" for c in p.named_children)
        pointer, reference, function, name = 0, False, False, None
        d = p.child_by_field_name("declarator")
        while d is not None:
            function |= d.type in ("function_declarator", "abstract_function_declarator")
            if d.type in ("pointer_declarator", "abstract_pointer_declarator", "array_declarator",
                          "abstract_array_declarator"):
                pointer += 1
            elif d.type in ("reference_declarator", "abstract_reference_declarator"):
                reference = True
            elif d.type in ("identifier", "field_identifier"):
                name = d.text.decode("utf-8", "surrogateescape")
                break
            nxt = d.child_by_field_name("declarator")
            if nxt is None:  # reference_declarator keeps its inner declarator unnamed
                inner = [c for c in d.named_children if c.type != "type_qualifier"]
                nxt = inner[-1] if inner else None
            d = nxt
        default = p.child_by_field_name("default_value")
        yield Param(
            name=name or f"arg{i}",
            text=_squash(p.text.decode("utf-8", "surrogateescape")),
            base=base,
            pointer=pointer,
            const=const,
            reference=reference,
            default=_squash(default.text.decode("utf-8", "surrogateescape")) if default is not None else None,
            function=function,
        )


def _squash(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def _first_error(root: ts.Node) -> tuple[int, int] | None:
    stack = [root]
    while stack:
        n = stack.pop()
        if n.type == "ERROR" or n.is_missing:
            return n.start_point[0] + 1, n.start_point[1] + 1
        if n.has_error:
            stack.extend(reversed(n.children))
    return None
