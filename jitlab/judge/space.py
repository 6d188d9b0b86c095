"""A tuning space: which ``#define`` values to try, which combinations are legal, at which sizes, and
which configurations a GPU cannot run.

A reference declares its space as ``TUNE`` (a dict) beside the rest of its contract::

    TUNE = {
        "defines": {"BLOCK": [64, 128, 256, 512, 1024], "ITEMS": [1, 2, 4, 8]},
        "constraints": ["BLOCK * ITEMS <= 4096"],     # expressions over the defines, or callables
        "sizes": [1 << 20, 1 << 24],                   # default: the ref's BENCH_SIZES, else its largest size
        "threads": "BLOCK",                            # threads per block a configuration launches
        "shared": "BLOCK * ITEMS * 4",                 # dynamic shared memory per block, bytes (optional)
        "run": run_tuned,                              # run(module, inputs, config); default: the ref's run
    }

A call may override any of these (``jitlab.tune(path, defines=..., sizes=...)``). The space is checked
before anything is tried: each define a list of values, each expression over the defines' names only.
Its size is counted first (the product of the axes' lengths), and a space of more than
:data:`ENUMERATE` configurations is never listed: a search with a budget samples it
(:class:`jitlab.judge.search.Search`). Constraints remove
configurations from the space; :func:`prune` then removes those a device cannot launch (threads per
block, shared memory, registers per block, from the build's own resource table), and the tuner records
each pruned point with its reason, so a rerun does not try it again.
"""

from __future__ import annotations

import ast
import hashlib
import itertools
import json
import math
import random
import reprlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from jitlab.errors import SnippetError
from jitlab.jit.sources import collect_sources

#: The most configurations a space lists whole; above it, a search (which needs a budget) samples it.
ENUMERATE = 100_000
#: The names an expression may use besides the defines'.
_BUILTINS = {"min": min, "max": max, "abs": abs}

#: Per compute capability: (the most shared memory one block may use with the opt-in, bytes; registers
#: per SM). CUDA C Programming Guide, "Technical Specifications per Compute Capability".
_ARCH_LIMITS = {
    70: (96 * 1024, 65536), 75: (64 * 1024, 65536), 80: (163 * 1024, 65536), 86: (99 * 1024, 65536),
    87: (163 * 1024, 65536), 89: (99 * 1024, 65536), 90: (227 * 1024, 65536), 100: (227 * 1024, 65536),
    120: (99 * 1024, 65536),
}


@dataclass(frozen=True)
class Limits:
    """What one block may use on a device (the launch-time limits a configuration is pruned by).

    Attributes:
        threads: Threads per block (1024 on every GPU since Fermi).
        shared: Shared memory per block in bytes, static plus dynamic, with the opt-in past 48 KB.
        registers: Registers per block (a block's threads × registers per thread must fit).
        regs_per_thread: Registers one thread may use.
    """

    threads: int = 1024
    shared: int = 48 * 1024
    registers: int = 65536
    regs_per_thread: int = 255

    @classmethod
    def for_arch(cls, arch: str) -> Limits:
        """The limits of ``sm_XY`` (an unknown arch gets the most conservative, sm_75's)."""
        cc = int("".join(c for c in arch if c.isdigit()) or 75)
        shared, registers = _ARCH_LIMITS.get(cc, _ARCH_LIMITS[75])
        return cls(shared=shared, registers=registers)


def check_defines(defines) -> dict[str, list]:
    """A space's axes as lists of values.

    Raises:
        SnippetError: Not a dict of ``#define`` names to non-empty lists of numbers or words (the message
            shows the form).
    """
    example = "{'BLOCK': [128, 256, 512]}"
    if not isinstance(defines, dict) or not defines:
        raise SnippetError(f"TUNE defines {reprlib.repr(defines)}: give a dict of each #define's values, e.g. "
                           f"defines={example} (-D BLOCK=128,256,512 on the command line)")
    axes = {}
    for name, values in defines.items():
        if not isinstance(name, str) or not name.isidentifier():
            raise SnippetError(f"TUNE defines: {name!r} is not a #define's name; name each as C does, e.g. {example}")
        if isinstance(values, (str, bytes)) or not isinstance(values, (list, tuple, range)) or not values:
            raise SnippetError(f"TUNE defines {name!r}: {reprlib.repr(values)}: give each #define a non-empty list "
                               f"of values, e.g. {{{name!r}: [128, 256, 512]}}")
        odd = next((v for v in values if not isinstance(v, (int, float, str))), None)
        if odd is not None:
            raise SnippetError(f"TUNE defines {name!r}: {odd!r} is not a value a #define can take; give numbers "
                               f"or words")
        axes[name] = list(values)
    return axes


def _evaluator(spec, what: str, names) -> Callable[[dict], object] | None:
    """A function of a configuration from a declared expression (``"BLOCK * ITEMS"``), callable or number.

    Raises:
        SnippetError: Not one of those, not a Python expression, or an expression naming what is not a define;
            when called, the expression or callable fails for a configuration.
    """
    if spec is None:
        return None
    if isinstance(spec, (int, float)):
        return lambda config: spec
    if callable(spec):
        return _guarded(spec, spec, what)
    if not isinstance(spec, str):
        raise SnippetError(f"TUNE {what} {spec!r}: give an expression over the defines (e.g. 'BLOCK * ITEMS <= 4096'), "
                           f"a callable of a configuration, or a number")
    try:
        code = compile(spec, f"<TUNE {what}>", "eval")
    except SyntaxError as e:
        raise SnippetError(f"TUNE {what} {spec!r} is not a Python expression ({e.msg}); write it over the "
                           f"defines' names, e.g. 'BLOCK * ITEMS <= 4096'") from None
    unknown = sorted({n.id for n in ast.walk(ast.parse(spec, mode="eval")) if isinstance(n, ast.Name)}
                     - set(names) - set(_BUILTINS))
    if unknown:
        raise SnippetError(f"TUNE {what} {spec!r} names {', '.join(unknown)}, which {'is' if len(unknown) == 1 else 'are'} "
                           f"not a define of the space ({', '.join(names)}): write it over those names, or add "
                           f"the define with its values")
    return _guarded(lambda config: eval(code, {"__builtins__": _BUILTINS}, dict(config)), spec, what)


def _guarded(f: Callable[[dict], object], spec, what: str) -> Callable[[dict], object]:
    """``f``, whose failure for a configuration is a :class:`SnippetError` naming the expression and the configuration."""
    def evaluate(config: dict):
        try:
            return f(config)
        except Exception as e:
            raise SnippetError(f"TUNE {what} {spec!r} fails for {config_key(config)}: {type(e).__name__}: {e}; "
                               f"make it hold for every value of the defines") from None
    return evaluate


@dataclass
class Space:
    """The configurations to try and the sizes to try them at.

    Attributes:
        defines: Each ``#define``'s candidate values, in the order given.
        constraints: Expressions (``"BLOCK * ITEMS <= 4096"``) or callables of a configuration; a
            configuration is in the space when all hold.
        sizes: Problem sizes, given to the ref's ``inputs``.
        threads: Threads per block a configuration launches (expression, callable or number), for pruning.
        shared: Dynamic shared memory per block in bytes (expression, callable or number), for pruning.
        run: ``run(module, inputs, config)`` when the launch depends on the configuration (a kernel-only
            launch's ``block=``); None: the ref's ``run(module, inputs)``.
        variant: The version of the ref whose inputs, tolerance and (without ``run``) run function are used.
    """

    defines: dict[str, list]
    constraints: list = field(default_factory=list)
    sizes: list = field(default_factory=list)
    threads: object = None
    shared: object = None
    run: Callable | None = None
    variant: str = "original"

    def __post_init__(self):
        self.defines = check_defines(self.defines)
        if isinstance(self.constraints, str) or not isinstance(self.constraints, (list, tuple)):
            raise SnippetError(f"TUNE constraints {self.constraints!r}: give a list of expressions, e.g. "
                               f"constraints=['BLOCK * ITEMS <= 4096']")
        self._checks = [_evaluator(c, "constraint", self.defines) for c in self.constraints]
        self._threads = _evaluator(self.threads, "threads", self.defines)
        self._shared = _evaluator(self.shared, "shared", self.defines)

    @classmethod
    def from_ref(cls, ref, **overrides) -> Space:
        """The ref's ``TUNE`` declaration with the call's overrides (None leaves a field as declared).

        Raises:
            SnippetError: Neither declares ``defines`` (the message shows a ``TUNE`` to add).
        """
        declared = dict(getattr(ref.module, "TUNE", {}) or {})
        declared.update({k: v for k, v in overrides.items() if v is not None})
        if not declared.get("defines"):
            raise SnippetError(f"{ref.path}: no tuning space: add TUNE = {{'defines': {{'BLOCK': [128, 256, 512]}}, "
                               f"'threads': 'BLOCK'}} to it, or pass defines= to jitlab.tune")
        unknown = sorted(set(declared) - {f for f in cls.__dataclass_fields__})
        if unknown:
            raise SnippetError(f"{ref.path}: TUNE has {', '.join(map(repr, unknown))}; it may hold "
                               f"{', '.join(cls.__dataclass_fields__)}")
        if not declared.get("sizes"):
            version = ref.version(declared.get("variant", "original"))
            declared["sizes"] = ref.timed_sizes(version)
        return cls(**declared)

    def allowed(self, config: dict) -> bool:
        """Whether every constraint holds for ``config``."""
        return all(check(config) for check in self._checks)

    def count(self) -> int:
        """How many configurations the axes make, before the constraints (the product of their lengths)."""
        return math.prod(map(len, self.defines.values()))

    def configs(self) -> list[dict]:
        """Every configuration that meets the constraints, in the declared order of the values.

        Raises:
            SnippetError: More than :data:`ENUMERATE` of them (the message says to give a search a budget).
        """
        if self.count() > ENUMERATE:
            raise SnippetError(f"TUNE: {self._size()}, too many to try every one: give budget=N (--budget N), "
                               f"and a search samples the space")
        names = list(self.defines)
        product = (dict(zip(names, values)) for values in itertools.product(*self.defines.values()))
        return [c for c in product if self.allowed(c)]

    def sample(self, n: int, rng: random.Random) -> list[dict]:
        """Up to ``n`` distinct configurations that meet the constraints, drawn at random without listing the
        space (fewer when the constraints leave few: it stops after ``20 * n`` draws)."""
        axes = self.defines.items()
        out: dict[str, dict] = {}
        for _ in range(20 * n):
            if len(out) == n:
                break
            c = {name: rng.choice(values) for name, values in axes}
            key = config_key(c)
            if key not in out and self.allowed(c):
                out[key] = c
        return list(out.values())

    def __contains__(self, config) -> bool:
        """Whether ``config`` is one of the space's configurations (its defines, values on their axes, allowed)."""
        if not isinstance(config, dict) or set(config) != set(self.defines):
            return False
        return all(config[name] in values for name, values in self.defines.items()) and self.allowed(config)

    def _size(self) -> str:
        return f"{self.count():,} configurations ({' × '.join(str(len(v)) for v in self.defines.values())})"

    def threads_of(self, config: dict) -> int | None:
        return int(self._threads(config)) if self._threads else None

    def shared_of(self, config: dict) -> int:
        return int(self._shared(config)) if self._shared else 0


def axes_from(items) -> dict[str, list]:
    """``NAME=V1,V2,...`` items, as written after ``-D`` on the command line, as axes (numbers as numbers).

    Raises:
        SnippetError: An item without values (the message shows the form).
    """
    axes = {}
    for item in items or ():
        name, sep, values = item.partition("=")
        if not sep or not values:
            raise SnippetError(f"-D {item}: give a define's values as NAME=V1,V2,... (e.g. -D BLOCK=128,256,512)")
        axes[name.strip()] = [int(v) if v.strip().lstrip("-").isdigit() else v.strip() for v in values.split(",")]
    return axes


def config_key(config: dict | None) -> str:
    """A configuration as one canonical string (the store's key): ``{"BLOCK": 256, "ITEMS": 4}``."""
    return json.dumps(config, sort_keys=True)


def launch_reason(space: Space, config: dict, limits: Limits) -> str | None:
    """Why ``config`` cannot launch, known before compiling (threads per block, dynamic shared memory), or None."""
    threads = space.threads_of(config)
    if threads is not None and not 0 < threads <= limits.threads:
        return f"{threads} threads per block (the device allows 1 to {limits.threads})"
    if space.shared_of(config) > limits.shared:
        return f"{space.shared_of(config)} B of dynamic shared memory per block (the device allows {limits.shared} B)"
    return None


def prune(space: Space, config: dict, resources: dict, arch: str) -> str | None:
    """Why a built configuration cannot run on ``arch``, or None: its launch (:func:`launch_reason`),
    then each kernel's static plus dynamic shared memory and its registers over the block's threads.

    Args:
        resources: The build's resource table (``{kernel: {arch: {"registers", "shared", …}}}``).
    """
    limits = Limits.for_arch(arch)
    reason = launch_reason(space, config, limits)
    if reason:
        return reason
    threads = space.threads_of(config)
    for kernel, per_arch in sorted(resources.items()):
        use = per_arch.get(arch)
        if not use:
            continue
        shared = use["shared"] + space.shared_of(config)
        if shared > limits.shared:
            return f"{kernel} needs {shared} B of shared memory per block ({arch} allows {limits.shared} B)"
        if threads and use["registers"] * threads > limits.registers:
            return (f"{kernel} needs {use['registers']} registers × {threads} threads = {use['registers'] * threads} "
                    f"registers per block ({arch} has {limits.registers})")
    return None


#: ptxas's words for a configuration that cannot exist on the arch (the compiler refuses it outright).
_PTXAS_LIMITS = ("too much shared data", "too many resources", "uses too many registers")


def compile_prune_reason(message: str) -> str | None:
    """The ptxas line of a compile error that only says the configuration exceeds the arch's limits, or None."""
    for line in message.splitlines():
        if any(words in line for words in _PTXAS_LIMITS):
            return line.strip()
    return None


def kernel_hash(path, ref_path) -> str:
    """A digest of the snippet's files and its reference: the "kernel content" half of a result's key.

    An edit of either makes old results another kernel's, except an edit of the reference's ``TUNE``
    (the space is not the kernel: a value added to an axis keeps every result measured before). A build
    key is not used, because it also changes with every configuration.
    """
    h = hashlib.sha256()
    for f in collect_sources(path):
        h.update(Path(f).name.encode() + b"\0" + Path(f).read_bytes() + b"\0")
    h.update(_without_space(Path(ref_path).read_text()).encode())
    return h.hexdigest()[:16]


def _without_space(ref_text: str) -> str:
    """A reference's code with its top-level ``TUNE = ...`` left out (the text itself if it does not parse)."""
    try:
        tree = ast.parse(ref_text)
    except SyntaxError:
        return ref_text
    tree.body = [node for node in tree.body if not (isinstance(node, (ast.Assign, ast.AnnAssign)) and any(
        isinstance(t, ast.Name) and t.id == "TUNE" for t in (node.targets if isinstance(node, ast.Assign) else [node.target])))]
    return ast.unparse(tree)
