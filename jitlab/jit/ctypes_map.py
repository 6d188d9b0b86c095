"""How C parameter types cross from Python: pointers take tensors, scalars take Python numbers.

One table per direction, so the mapping is data a reader can check at a glance.
"""

from __future__ import annotations

import ctypes
import re
import struct

import torch

from jitlab.errors import SnippetError
from jitlab.jit.parse import Function, Param

# Pointee type → the tensor dtype a pointer parameter accepts (LP64 Linux sizes).
POINTER_DTYPES: dict[str, torch.dtype] = {
    "float": torch.float32,
    "double": torch.float64,
    "__half": torch.float16,
    "half": torch.float16,
    "__nv_bfloat16": torch.bfloat16,
    "nv_bfloat16": torch.bfloat16,
    "c10::Half": torch.float16,
    "c10::BFloat16": torch.bfloat16,
    "bool": torch.bool,
    "char": torch.int8,
    "signed char": torch.int8,
    "int8_t": torch.int8,
    "unsigned char": torch.uint8,
    "uint8_t": torch.uint8,
    "short": torch.int16,
    "short int": torch.int16,
    "int16_t": torch.int16,
    "unsigned short": torch.uint16,
    "uint16_t": torch.uint16,
    "int": torch.int32,
    "signed": torch.int32,
    "signed int": torch.int32,
    "int32_t": torch.int32,
    "unsigned": torch.uint32,
    "unsigned int": torch.uint32,
    "uint32_t": torch.uint32,
    "long": torch.int64,
    "long int": torch.int64,
    "long long": torch.int64,
    "long long int": torch.int64,
    "int64_t": torch.int64,
    "ptrdiff_t": torch.int64,
    "unsigned long": torch.uint64,
    "unsigned long long": torch.uint64,
    "uint64_t": torch.uint64,
    "size_t": torch.uint64,
}

# Scalar type → (ctypes type, Python kind). Kinds: "int", "float", "bool", "half", "bfloat16".
SCALARS: dict[str, tuple[type, str]] = {
    "bool": (ctypes.c_bool, "bool"),
    "char": (ctypes.c_int8, "int"),
    "signed char": (ctypes.c_int8, "int"),
    "int8_t": (ctypes.c_int8, "int"),
    "unsigned char": (ctypes.c_uint8, "int"),
    "uint8_t": (ctypes.c_uint8, "int"),
    "short": (ctypes.c_int16, "int"),
    "short int": (ctypes.c_int16, "int"),
    "int16_t": (ctypes.c_int16, "int"),
    "unsigned short": (ctypes.c_uint16, "int"),
    "uint16_t": (ctypes.c_uint16, "int"),
    "int": (ctypes.c_int32, "int"),
    "signed": (ctypes.c_int32, "int"),
    "signed int": (ctypes.c_int32, "int"),
    "int32_t": (ctypes.c_int32, "int"),
    "unsigned": (ctypes.c_uint32, "int"),
    "unsigned int": (ctypes.c_uint32, "int"),
    "uint32_t": (ctypes.c_uint32, "int"),
    "long": (ctypes.c_int64, "int"),
    "long int": (ctypes.c_int64, "int"),
    "long long": (ctypes.c_int64, "int"),
    "long long int": (ctypes.c_int64, "int"),
    "int64_t": (ctypes.c_int64, "int"),
    "ptrdiff_t": (ctypes.c_int64, "int"),
    "unsigned long": (ctypes.c_uint64, "int"),
    "unsigned long long": (ctypes.c_uint64, "int"),
    "uint64_t": (ctypes.c_uint64, "int"),
    "size_t": (ctypes.c_uint64, "int"),
    "float": (ctypes.c_float, "float"),
    "double": (ctypes.c_double, "float"),
    "__half": (ctypes.c_uint16, "half"),
    "half": (ctypes.c_uint16, "half"),
    "__nv_bfloat16": (ctypes.c_uint16, "bfloat16"),
    "nv_bfloat16": (ctypes.c_uint16, "bfloat16"),
}

# 16-bit float scalars cross as their bit pattern; the shim reinterprets them.
BITS16_TYPES = {"__half": "__half", "half": "__half", "__nv_bfloat16": "__nv_bfloat16", "nv_bfloat16": "__nv_bfloat16"}

RETURNS: dict[str, type | None] = {"void": None, **{k: v[0] for k, v in SCALARS.items() if v[1] in ("int", "float", "bool")}}

#: The largest finite value of the float types narrower than a Python float: a larger finite number
#: would become inf in C, so the typed call refuses it (``float('inf')`` itself is passed as is).
FLOAT_MAX: dict[str, float] = {
    "float": 3.4028234663852886e38,
    "__half": 65504.0,
    "__nv_bfloat16": 3.3895313892515355e38,
}

# C literals a default argument may be, sign aside (digit separators and suffixes allowed): 42, 0x2Au, 1.5f, 2e3.
_INT_LITERAL = re.compile(r"(?P<digits>0[xX][0-9a-fA-F']+|0[bB][01']+|[0-9][0-9']*)"
                          r"(?:[uU](?:ll|LL|[lL])?|(?:ll|LL|[lL])[uU]?)?")
_FLOAT_LITERAL = re.compile(r"(?P<digits>(?:[0-9][0-9']*\.[0-9']*|\.[0-9][0-9']*)(?:[eE][+-]?[0-9]+)?"
                            r"|[0-9][0-9']*[eE][+-]?[0-9]+)[fFlL]?")


_INT_WORDS = {"signed", "unsigned", "short", "long", "int", "char"}


def strip_qualifiers(base: str) -> str:
    """The type's name as the tables spell it: qualifiers dropped, ``std::``/``::`` dropped from a name the
    tables know (``std::int64_t``, ``::size_t``), and a built-in integer's words in their one order
    (``long unsigned int``, ``unsigned long int`` → ``unsigned long``; ``unsigned`` → ``unsigned int``)."""
    words = [w for w in base.split() if w not in ("const", "volatile", "__restrict__", "__restrict", "restrict")]
    name = " ".join(words)
    short = re.sub(r"^(?:std)?::", "", name)
    if short != name and short in SCALARS:
        return short
    if not words or not set(words) <= _INT_WORDS or words.count("long") > 2:
        return name
    if "char" in words:
        return "char" if len(words) == 1 else "unsigned char" if "unsigned" in words else "signed char"
    size = "short" if "short" in words else " ".join(["long"] * words.count("long")) or "int"
    return ("unsigned " if "unsigned" in words else "") + size


def pointer_dtype(p: Param) -> torch.dtype | None:
    """The tensor dtype a pointer parameter accepts; ``None`` for ``void*`` (any dtype)."""
    return POINTER_DTYPES[strip_qualifiers(p.base)] if strip_qualifiers(p.base) != "void" else None


def scalar_kind(p: Param) -> tuple[type, str]:
    """The ctypes type and Python kind of a scalar parameter."""
    return SCALARS[strip_qualifiers(p.base)]


def default_value(p: Param) -> int | float | bool:
    """The Python value of a scalar parameter's C++ default argument, when it is a plain literal.

    ``int b = 3``, ``unsigned m = 0x10u``, ``float a = -1.5f``, ``bool on = true``: what the typed
    call passes when the argument is left out.

    Raises:
        ValueError: No default, a pointer's default, or one that is not a plain literal
            (a macro, an expression, a character): the caller must pass the argument.
    """
    if p.default is None or p.pointer:
        raise ValueError(f"`{p.name}` has no default jitlab can evaluate")
    text = p.default.strip()
    kind = scalar_kind(p)[1]
    if kind == "bool" and text in ("true", "false"):
        return text == "true"
    sign = -1 if text.startswith("-") else 1
    body = text[1:].strip() if text[:1] in ("+", "-") else text
    floating = kind in ("float", "half", "bfloat16")
    m = _INT_LITERAL.fullmatch(body)
    if m:
        value = sign * _int_literal(m.group("digits").replace("'", ""))
        return float(value) if floating else value
    m = _FLOAT_LITERAL.fullmatch(body)
    if m and floating:
        return sign * float(m.group("digits").replace("'", ""))
    raise ValueError(f"the default `{text}` of `{p.name}` is not a plain literal")


def _int_literal(digits: str) -> int:
    """The value of a C integer literal's digits: hexadecimal, binary, octal (leading 0) or decimal."""
    if digits[:2] in ("0x", "0X"):
        return int(digits[2:], 16)
    if digits[:2] in ("0b", "0B"):
        return int(digits[2:], 2)
    if len(digits) > 1 and digits.startswith("0"):
        return int(digits, 8)
    return int(digits)


def unmappable(fn: Function) -> str:
    """Why jitlab cannot call a kernel-only function from Python (a parameter or return type it cannot
    pass), in one clause, or ``""`` if it can."""
    for p in fn.params:
        base = strip_qualifiers(p.base)
        ok = not p.function and not p.reference and (
            (p.pointer == 1 and (base == "void" or base in POINTER_DTYPES)) or (p.pointer == 0 and base in SCALARS))
        if not ok:
            what = "is a function" if p.function else f"has type `{p.ctype}`"
            return f"parameter `{p.text}` {what}, which jitlab cannot pass from Python"
    if fn.kind == "host" and strip_qualifiers(fn.returns) not in RETURNS:
        return f"returns `{fn.returns}`, which jitlab cannot return to Python"
    return ""


def check_mappable(fn: Function) -> None:
    """Raise if a kernel-only function has a parameter or return type jitlab cannot pass.

    Raises:
        SnippetError: Naming the function, the parameter (:func:`unmappable`) and what would work instead.
    """
    why = unmappable(fn)
    if why.startswith("returns"):
        raise SnippetError(f"{fn.path}:{fn.line}: {fn.name}: {why}; return void or a plain scalar, write the result "
                           f"through a pointer, or mark it `static`")
    if why:
        kinds = ", ".join(sorted({"float", "double", "__half", "__nv_bfloat16", "int", "int64_t", "uint8_t", "bool"}))
        raise SnippetError(f"{fn.path}:{fn.line}: {fn.name}: {why}. Kernel-only snippets take pointers to {kinds} "
                           f"(tensors) and plain scalars (Python numbers); pass a pointer instead, or mark the "
                           f"function `static` to keep it private")


def half_bits(value: float) -> int:
    """The IEEE binary16 bit pattern of ``value`` (round to nearest even).

    Raises:
        OverflowError: For a finite value too large for float16 (it would become inf).
    """
    return struct.unpack("<H", struct.pack("<e", value))[0]


def bfloat16_bits(value: float) -> int:
    """The bfloat16 bit pattern of ``value`` (round to nearest even, NaN kept).

    Raises:
        OverflowError: For a finite value too large for bfloat16 (it would round to inf).
    """
    bits = float32_bits(value)
    if (bits & 0x7F800000) == 0x7F800000:
        return 0x7FC0 if bits & 0x7FFFFF else bits >> 16  # NaN, ±inf
    bits += 0x7FFF + ((bits >> 16) & 1)
    if (bits & 0x7F800000) == 0x7F800000:
        raise OverflowError("float too large for bfloat16")
    return (bits >> 16) & 0xFFFF


def float32_bits(value: float) -> int:
    """The IEEE binary32 bit pattern of ``value`` (round to nearest even), as C's ``float`` holds it.

    Raises:
        OverflowError: For a finite value too large for float32 (it would become inf).
    """
    return struct.unpack("<I", struct.pack("<f", value))[0]
