"""Whether a function inside ``#if``/``#ifdef``/``#else`` is compiled in this build, decided before compiling.

The parser records each function's guard (:attr:`jitlab.jit.parse.Function.guard`); the plan asks
:func:`decide` whether it holds with the build's ``defines``. A function whose guard is false gets no
shim, no binding and no NVRTC name expression (those would name something the compiler never saw), and
calling it says which branch left it out. The answer is given only when it is certain:

- ``0``/``1`` and arithmetic, comparisons, ``&&``, ``||``, ``!`` (not ``?:``);
- ``defined(NAME)`` and ``NAME`` for names the build's ``defines`` give; for other names, as C does
  (not defined, value 0), only where nothing else could define them: the snippet's own files neither
  ``#define`` nor ``#undef`` them and include no local header, and the name is not the compiler's or
  the toolkit's (``__CUDA_ARCH__``, ``CUDART_VERSION``, ``_WIN32``...).

Anything else is undecided (``None``): the function is treated as compiled, as before.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

from jitlab.errors import SnippetError

_TOKEN = re.compile(r"\s*(?:(?P<num>0[xX][0-9a-fA-F]+|\d+)[uUlL]*|(?P<id>[A-Za-z_]\w*)|"
                    r"(?P<op>&&|\|\||==|!=|<=|>=|<<|>>|[-+*/%<>!~&|^()?:]))")
#: Names an included system header or the compiler may define: never assumed undefined.
_SYSTEM = re.compile(r"_|CUDA|CUDART|CUB|THRUST|NV|NDEBUG|TORCH|AT_|C10|PYBIND|M_")
_ALLOWED = (ast.Expression, ast.BoolOp, ast.BinOp, ast.UnaryOp, ast.Compare, ast.Constant, ast.And,
            ast.Or, ast.Not, ast.Invert, ast.USub, ast.UAdd, ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Mod,
            ast.LShift, ast.RShift, ast.BitAnd, ast.BitOr, ast.BitXor, ast.Eq, ast.NotEq, ast.Lt, ast.LtE, ast.Gt,
            ast.GtE)


#: The conditionals whose branches the parser follows, each under its guard.
CONDITIONALS = ("preproc_if", "preproc_ifdef", "preproc_elif", "preproc_elifdef")


def branches(node, guard: str) -> list[tuple[list, str]]:
    """``(children, guard)`` for each branch of the tree-sitter ``#if``/``#ifdef``/``#elif`` chain at
    ``node``: a branch holds under ``guard`` and its condition, the next ones under its negation."""
    out = []
    while node is not None:
        cond = _condition(node)
        alternative = node.child_by_field_name("alternative")
        heads = (node.child_by_field_name("condition"), node.child_by_field_name("name"), alternative)
        skip = {(n.start_byte, n.end_byte) for n in heads if n is not None}
        out.append(([c for c in node.named_children if (c.start_byte, c.end_byte) not in skip], _both(guard, cond)))
        guard = _both(guard, f"!({cond})")
        if alternative is not None and alternative.type not in CONDITIONALS:  # #else
            out.append((list(alternative.named_children), guard))
            break
        node = alternative
    return out


def _condition(node) -> str:
    """A conditional's test as a ``#if`` expression: ``#ifdef X`` is ``defined(X)``, ``#ifndef X``
    ``!defined(X)``; line continuations joined."""
    name = node.child_by_field_name("name")
    if name is not None:
        return f"{'!' if node.children[0].type.endswith('ndef') else ''}defined({name.text.decode('utf-8', 'surrogateescape')})"
    cond = node.child_by_field_name("condition")
    return " ".join(cond.text.decode("utf-8", "surrogateescape").replace("\\\n", " ").split()) if cond is not None else "1"


def _both(guard: str, cond: str) -> str:
    return f"{guard} && ({cond})" if guard else cond


def compiled(files: list, defines: dict) -> tuple[list, list[tuple[str, str]]]:
    """The parsed files without the functions whose guards are false for ``defines``, and why each is out
    (a function with a variant that stays is no news).

    Raises:
        SnippetError: Every function is left out (the message names each branch and the define to pass).
    """
    text = "\n".join(f.text for f in files)
    out, left_out = [], []
    for f in files:
        keep = []
        for fn in f.functions:
            if decide(fn.guard, defines, text) is not False:
                keep.append(fn)
            else:
                where = f"{Path(fn.path).name}:{fn.line}"
                left_out.append((fn.name, f"left out by the preprocessor: `{describe(fn.guard)}` around it ({where}) "
                                          f"is false for this build; {fix(fn.guard, defines)}"))
        out.append(dataclasses.replace(f, functions=keep) if len(keep) < len(f.functions) else f)
    kept = {fn.name for f in out for fn in f.functions}
    left_out = [(name, why) for name, why in left_out if name not in kept]
    if left_out and not kept:
        raise SnippetError(f"{', '.join(str(f.path) for f in files)}: every function is inside a preprocessor branch "
                           f"this build leaves out: " + "; ".join(f"{n} ({why})" for n, why in left_out))
    return out, left_out


class Undecided(Exception):
    """The guard names something only the compiler knows."""


def decide(guard: str, defines: dict, text: str) -> bool | None:
    """Whether ``guard`` holds in a build with ``defines`` (``{"FAST": 1, "FLAG": None}``) of a file whose
    text is ``text``; ``None`` when that cannot be known without the compiler."""
    if not guard:
        return True
    try:
        return bool(_evaluate(_python(guard, defines, text)))
    except (Undecided, SyntaxError, ZeroDivisionError, ValueError, TypeError):
        return None


def describe(guard: str) -> str:
    """The guard as the user wrote it, roughly: ``#ifdef FAST`` for ``defined(FAST)``, else ``#if ...``."""
    m = re.fullmatch(r"(!?)defined\((\w+)\)", guard)
    if m:
        return f"#if{'n' if m.group(1) else ''}def {m.group(2)}"
    return f"#if {guard}"


def fix(guard: str, defines: dict) -> str:
    """What makes ``guard`` true, said as the build's ``defines=``."""
    m = re.fullmatch(r"(!?)defined\((\w+)\)", guard)
    if m and not m.group(1):
        return f"to build it, pass defines={{{m.group(2)!r}: 1}}"
    if m:
        return f"to build it, leave {m.group(2)} out of defines="
    if not re.search(r"[A-Za-z_]", guard.replace("defined", "")):
        return "the source itself turns it off (edit the `#if` to build it)"
    given = ", ".join(f"{k!r}: {v!r}" for k, v in defines.items())
    return f"to build it, pass defines= that make it true (this build's: {{{given}}})"


def _python(guard: str, defines: dict, text: str, depth: int = 0) -> str:
    """The guard as a Python expression over integers, C's precedence kept (``!x == y`` is ``(not x) == y``)."""
    if depth > 8:
        raise Undecided
    tokens, pos = [], 0
    while guard[pos:].strip():
        m = _TOKEN.match(guard, pos)
        if not m:
            raise Undecided
        tokens.append(m)
        pos = m.end()
    out: list[str] = []
    awaiting: list[int] = []  # the paren depth at which each open `!` waits for its operand to end
    level = i = 0

    def operand_ended() -> None:
        while awaiting and awaiting[-1] == level:
            awaiting.pop()
            out.append(")")

    while i < len(tokens):
        m = tokens[i]
        num, name, op = m.group("num"), m.group("id"), m.group("op")
        if num:
            out.append(str(int(num, 8) if re.fullmatch(r"0\d+", num) else int(num, 0)))
            operand_ended()
        elif name == "defined":
            bracket = i + 1 < len(tokens) and tokens[i + 1].group("op") == "("
            target = tokens[i + 2] if bracket and i + 2 < len(tokens) else tokens[i + 1] if i + 1 < len(tokens) else None
            if target is None or not target.group("id"):
                raise Undecided
            out.append("1" if _is_defined(target.group("id"), defines, text) else "0")
            i += 3 if bracket else 1
            operand_ended()
        elif name:
            out.append(f"({_value(name, defines, text, depth)})")
            operand_ended()
        elif op == "!":
            out.append("(not ")
            awaiting.append(level)
        elif op == "(":
            out.append("(")
            level += 1
        elif op == ")":
            out.append(")")
            level -= 1
            operand_ended()
        elif op in ("?", ":"):  # C's c ? a : b is Python's a if c else b: left to the compiler
            raise Undecided
        else:
            out.append({"&&": " and ", "||": " or ", "/": "//"}.get(op, op))
        i += 1
    if awaiting:
        raise Undecided
    return "".join(out)


def _is_defined(name: str, defines: dict, text: str) -> bool:
    if name in defines:
        return True
    if _SYSTEM.match(name) or re.search(rf"^\s*#\s*(?:define|undef)\s+{name}\b", text, re.MULTILINE) \
            or re.search(r'^\s*#\s*include\s*"', text, re.MULTILINE):
        raise Undecided
    return False


def _value(name: str, defines: dict, text: str, depth: int) -> str:
    if name in defines:
        value = defines[name]
        return "1" if value is None or str(value) == "" else _python(str(value), defines, text, depth + 1)
    _is_defined(name, defines, text)  # raises when it might be defined
    return "0"


def _evaluate(expr: str):
    tree = ast.parse(expr.strip() or "0", mode="eval")
    if not all(isinstance(n, _ALLOWED) for n in ast.walk(tree)):
        raise Undecided
    return eval(compile(tree, "<guard>", "eval"), {"__builtins__": {}})  # noqa: S307 -- integers and operators only
