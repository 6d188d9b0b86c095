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

A call may override any of these (``jitlab.tune(path, defines=..., sizes=...)``). Constraints remove
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from jitlab.errors import SnippetError
from jitlab.jit.sources import collect_sources

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


def _evaluator(spec, what: str) -> Callable[[dict], object] | None:
    """A function of a configuration from a declared expression (``"BLOCK * ITEMS"``) or callable."""
    if spec is None or callable(spec):
        return spec
    if isinstance(spec, (int, float)):
        return lambda config: spec
    try:
        code = compile(str(spec), f"<TUNE {what}>", "eval")
    except SyntaxError as e:
        raise SnippetError(f"TUNE {what} {spec!r} is not a Python expression ({e.msg}); write it over the "
                           f"defines' names, e.g. 'BLOCK * ITEMS <= 4096'") from None
    return lambda config: eval(code, {"__builtins__": {"min": min, "max": max, "abs": abs}}, dict(config))


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
        if not self.defines or not all(isinstance(v, (list, tuple)) and v for v in self.defines.values()):
            raise SnippetError(f"TUNE defines {self.defines!r}: give each #define a non-empty list of values, "
                               f"e.g. {{'BLOCK': [128, 256, 512]}}")
        self._checks = [_evaluator(c, "constraint") for c in self.constraints]
        self._threads = _evaluator(self.threads, "threads")
        self._shared = _evaluator(self.shared, "shared")

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
        declared["defines"] = {k: list(v) for k, v in declared["defines"].items()}
        return cls(**declared)

    def allowed(self, config: dict) -> bool:
        """Whether every constraint holds for ``config``."""
        return all(check(config) for check in self._checks)

    def configs(self) -> list[dict]:
        """Every configuration that meets the constraints, in the declared order of the values."""
        names = list(self.defines)
        product = (dict(zip(names, values)) for values in itertools.product(*self.defines.values()))
        return [c for c in product if self.allowed(c)]

    def threads_of(self, config: dict) -> int | None:
        return int(self._threads(config)) if self._threads else None

    def shared_of(self, config: dict) -> int:
        return int(self._shared(config)) if self._shared else 0


class Search:
    """The configurations a search tries, round by round, within ``budget`` of them.

    Within the budget (or without one) it is every configuration, in one round. Above it, a seeded
    random few first; then each round, per size, a model of the timings so far (least squares, a little
    ridge, of the log time on a quadratic in each define's log2: tile sizes act by their ratios)
    ranks the untried configurations, and the sizes take turns picking their predicted fastest. On the
    SGEMM tiles' measured H200 timings (tests/fixtures/tune), 60 of 300 found each size's best within
    3 % in 299 of 300 tries (100 seeds × 3 sizes); walks from the fastest to their neighbours missed
    in 28 of 150, a random 60 for 9 seeds in 10. The same seed and the same timings give the same
    choices, so a resumed search (its timings in the store) tries again what it tried before, which
    the store already knows.
    """

    #: Random configurations first (at least; or an eighth of the budget).
    START = 8
    #: The ridge term of the fit (the features are of order 1).
    RIDGE = 1.0

    def __init__(self, space: Space, budget: int | None = None, seed: int = 0):
        self.space = space
        self.every = space.configs()
        self.budget = len(self.every) if budget is None else max(0, min(budget, len(self.every)))
        self.exhaustive = self.budget == len(self.every)
        self._random = random.Random(seed)
        self._keys = {config_key(c) for c in self.every}
        # Per axis: its values are positive numbers (placed by their log2), else words (by their place).
        self._numeric = {name: all(isinstance(x, (int, float)) and not isinstance(x, bool) and x > 0 for x in values)
                         for name, values in space.defines.items()}
        self.tried: dict[str, dict] = {}

    @property
    def left(self) -> int:
        return self.budget - len(self.tried)

    def next(self, times: dict[object, dict[str, float]], batch: int) -> list[dict]:
        """The next round's configurations (none when the budget is spent).

        Args:
            times: Per size (or per device and size), each timed configuration's key
                (:func:`config_key`) → its time; lower is better.
            batch: How many to choose at most, after the first round.
        """
        if self.left <= 0:
            return []
        untried = [c for c in self.every if config_key(c) not in self.tried]
        if self.exhaustive:
            picks = untried
        elif not self.tried:
            picks = self._random.sample(untried, min(self.left, max(self.START, self.budget // 8)))
        else:
            n = min(self.left, batch)
            picks = self._predicted(times, untried, n)
            rest = [c for c in untried if c not in picks]
            picks += self._random.sample(rest, min(n - len(picks), len(rest)))
        for c in picks:
            self.tried[config_key(c)] = c
        return picks

    def _predicted(self, times: dict[object, dict[str, float]], untried: list[dict], n: int) -> list[dict]:
        """Up to ``n`` untried configurations, each size's predicted fastest in turn."""
        import torch  # lazy: only a budgeted search fits a model

        if not untried:
            return []
        x_all = torch.tensor([self._features(c) for c in untried], dtype=torch.float64)
        rankings = []
        for t in times.values():
            # Only this space's configurations (a store may hold others, from a space since changed).
            timed = [(json.loads(key), ms) for key, ms in t.items() if key in self._keys and ms and ms > 0]
            if len(timed) < 3:
                continue
            x = torch.tensor([self._features(c) for c, _ in timed], dtype=torch.float64)
            y = torch.log(torch.tensor([ms for _, ms in timed], dtype=torch.float64))
            ridge = self.RIDGE * torch.eye(x.shape[1], dtype=torch.float64)
            w = torch.linalg.solve(x.T @ x + ridge, x.T @ (y - y.mean()))
            rankings.append(torch.argsort(x_all @ w, stable=True).tolist())
        picks, seen = [], set()
        for turn in zip(*rankings):
            for i in turn:
                if i not in seen:
                    seen.add(i)
                    picks.append(untried[i])
                    if len(picks) == n:
                        return picks
        return picks

    def _features(self, config: dict) -> list[float]:
        """1, each define's coordinate (log2 of a positive number, else its place on its axis), and
        their products two by two."""
        v = [math.log2(config[name]) if self._numeric[name] else float(values.index(config[name]))
             for name, values in self.space.defines.items()]
        return [1.0, *v, *(a * b for a, b in itertools.combinations_with_replacement(v, 2))]


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
