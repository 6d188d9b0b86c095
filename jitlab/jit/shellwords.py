"""torch's meaning of its flag lists and ``TORCH_CUDA_ARCH_LIST``, without a shell.

torch writes each entry of ``extra_cflags``, ``extra_cuda_cflags`` and ``extra_ldflags`` as it is into
``build.ninja``, whose commands run under ``/bin/sh -c``: so an empty entry is no flag at all,
``"-O3 -Wall"`` is two flags and ``'-DMSG="a b"'`` is one. :func:`words` splits an entry the way that
shell would and returns an argument list, which jitlab passes to its compilers directly; an entry
that would have done something only a shell does (run a second command, substitute one, redirect,
expand a variable) is refused with the character named, since jitlab runs no shell to do it.

:func:`torch_arch_list` reads ``TORCH_CUDA_ARCH_LIST`` as torch's ``_get_cuda_arch_flags`` does:
``"8.0 9.0"``, ``"7.5;8.6+PTX"``, ``"Ampere;Hopper"``, ``"native"`` (the visible GPUs, jitlab's default).
"""

from __future__ import annotations

import os
import re

from jitlab.errors import ArgumentError, FlagError

#: Characters a shell acts on outside quotes (beyond spaces, quotes and backslashes, which split and quote).
_OPERATORS = {";": "ends the command", "|": "pipes into another command", "&": "runs a command in the background",
              "<": "redirects input", ">": "redirects output", "(": "starts a subshell", ")": "ends a subshell",
              "`": "substitutes a command's output", "$": "expands a variable or a command",
              "\n": "ends the command"}
#: Backslash escapes that mean something inside double quotes (POSIX sh); elsewhere a backslash there is kept.
_DQ_ESCAPES = '$`"\\\n'


def words(entry: str, arg: str = "extra_cflags") -> list[str]:
    """The arguments a POSIX shell would make of ``entry``: split at unquoted blanks, quotes removed.

    The entry is stripped first, as torch strips it. Single quotes keep everything, double quotes
    keep all but ``$``, backquote and their own backslash escapes; a backslash outside quotes keeps
    the next character. An empty entry, or one of blanks, gives no argument; ``'""'`` gives one
    empty argument, as in the shell.

    Args:
        entry: One item of a torch flag list.
        arg: The keyword it came from, for messages.

    Raises:
        FlagError: A character the shell would act on (``;``, ``|``, ``&``, ``<``, ``>``, ``(``,
            ``)``, a backquote or ``$`` outside single quotes, a line break, or a ``#`` starting a
            comment), or an unclosed quote; the message names it and how to pass it as text.
    """
    if not isinstance(entry, str):
        raise ArgumentError(f"{arg}= takes strings (compiler flags), not {type(entry).__name__}: {entry!r}")
    entry = entry.strip()  # torch strips each entry before its shell sees it: "-g\n\n" is -g
    out: list[str] = []
    word: list[str] | None = None  # None: between words
    quote = ""
    tilde = False  # the word starts with an unquoted ~, which the shell expands to a home folder
    i = 0
    while i < len(entry):
        c = entry[i]
        if quote == "'":
            if c == "'":
                quote = ""
            else:
                word.append(c)
        elif quote == '"':
            if c == '"':
                quote = ""
            elif c in "$`":
                _refuse(entry, arg, c, "inside double quotes")
            elif c == "\\" and i + 1 < len(entry) and entry[i + 1] in _DQ_ESCAPES:
                i += 1
                if entry[i] != "\n":
                    word.append(entry[i])
            else:
                word.append(c)
        elif c in " \t":
            if word is not None:
                out.append(_finish(word, tilde))
                word, tilde = None, False
        elif c in "'\"":
            quote, word = c, word if word is not None else []
        elif c == "\\":
            if i + 1 == len(entry):
                raise FlagError(f"{arg}={entry!r}: ends in a backslash, which escapes nothing; remove it or "
                                    f"write it as '\\\\'")
            i += 1
            if entry[i] != "\n":  # backslash-newline joins lines
                word = (word or []) + [entry[i]]
        elif c in _OPERATORS:
            _refuse(entry, arg, c, "outside quotes")
        elif c == "#" and word is None:
            _refuse(entry, arg, c, "starting a word")
        else:
            tilde = tilde or (word is None and c == "~")
            word = (word or []) + [c]
        i += 1
    if quote:
        raise FlagError(f"{arg}={entry!r}: the {quote} quote is never closed; close it, or escape it as \\{quote}")
    if word is not None:
        out.append(_finish(word, tilde))
    return out


def _finish(word: list[str], tilde: bool) -> str:
    text = "".join(word)
    return os.path.expanduser(text) if tilde else text


def _refuse(entry: str, arg: str, c: str, where: str) -> None:
    what = "starts a comment" if c == "#" else _OPERATORS[c]
    shown = "a line break" if c == "\n" else f"'{c}'"
    where = "starting a word" if c == "#" else where
    raise FlagError(
        f"{arg}={entry!r}: {shown} {where} {what} in the shell torch's build runs its flags through; jitlab "
        f"passes flags to the compiler without a shell and does not do that. Pass the flag's own text instead"
        + ("" if c == "\n" else f" (to keep {shown} as text, put the flag inside single quotes)"))


def flag_list(value, arg: str) -> list[str]:
    """A torch flag keyword (``None``, one string, or a list of strings) as arguments: each entry split by :func:`words`."""
    if value is None:
        return []
    entries = [value] if isinstance(value, str) else list(value)
    return [w for e in entries for w in words(e, arg)]


#: torch's named architectures (its ``_get_cuda_arch_flags``), combined names first.
NAMED_ARCHES = {"Kepler+Tesla": "3.7", "Kepler": "3.5+PTX", "Maxwell+Tegra": "5.3", "Maxwell": "5.0;5.2+PTX",
                "Pascal": "6.0;6.1+PTX", "Volta+Tegra": "7.2", "Volta": "7.0+PTX", "Turing": "7.5+PTX",
                "Ampere+Tegra": "8.7", "Ampere": "8.0;8.6+PTX", "Ada": "8.9+PTX", "Hopper": "9.0+PTX",
                "Blackwell+Tegra": "11.0", "Blackwell": "10.0;10.3;12.0;12.1+PTX"}


def torch_arch_list(value: str | None = None) -> list[str] | None:
    """``TORCH_CUDA_ARCH_LIST`` (or ``value``) as jitlab archs: ``"7.5;9.0+PTX"`` → ``["sm_75", "sm_90", "compute_90"]``.

    Returns:
        The archs, or ``None`` when it is unset, empty or ``native`` (jitlab's default: the GPU in use).

    Raises:
        ArgumentError: An entry that is neither ``X.Y`` (with ``a`` and ``+PTX`` allowed) nor a name
            torch knows, naming the forms it takes.
    """
    value = os.environ.get("TORCH_CUDA_ARCH_LIST") if value is None else value
    if not value or not value.strip() or value.strip() == "native":
        return None
    text = value.replace(" ", ";")
    for name, archs in NAMED_ARCHES.items():
        text = text.replace(name, archs)
    out: list[str] = []
    for item in filter(None, text.split(";")):
        m = re.fullmatch(r"(\d+)\.(\d+)(a?)(\+PTX)?", item)
        if not m:
            raise ArgumentError(f"TORCH_CUDA_ARCH_LIST={value!r}: {item!r} is not an architecture; use versions such "
                                f"as '8.0;9.0+PTX' (space or ';' separated, '+PTX' adds PTX) or names such as "
                                f"'Ampere;Hopper' ({', '.join(NAMED_ARCHES)})")
        num = m.group(1) + m.group(2) + m.group(3)
        for arch in [f"sm_{num}", *([f"compute_{m.group(1) + m.group(2)}"] if m.group(4) else [])]:
            if arch not in out:
                out.append(arch)
    return out or None


_ARCH_FLAG = re.compile(r"^(-arch|--gpu-architecture|-gencode|--generate-code|-code|--gpu-code)(=|$)")


def names_arch(cuda_flags) -> bool:
    """Whether nvcc flags choose the architectures themselves (``-arch``, ``-gencode``, ``-code``), in which
    case, as in torch, no architecture flags are added to them."""
    return any(_ARCH_FLAG.match(f) for f in cuda_flags)


def archs_named(cuda_flags) -> list[str]:
    """The architectures nvcc flags build code for: ``-gencode arch=compute_80,code=sm_80`` → ``["sm_80"]``,
    ``-arch=sm_90`` → ``["sm_90"]`` (what it names beyond an arch, such as ``native``, is left out)."""
    flags = list(cuda_flags)
    out: list[str] = []
    for i, f in enumerate(flags):
        m = _ARCH_FLAG.match(f)
        if not m:
            continue
        value = f[m.end():] if m.group(2) else (flags[i + 1] if i + 1 < len(flags) else "")
        if "code=" in value:
            value = value.split("code=", 1)[1] if m.group(1) in ("-gencode", "--generate-code") else value
        for arch in re.findall(r"\b(?:sm|compute)_\d+[af]?\b", value):
            if arch not in out:
                out.append(arch)
    return out
