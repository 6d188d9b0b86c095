"""The reference contract: a snippet's ``NAME.ref.py``, where it lives, what it holds, and checking
every version it names.

A kernel ``kernels/NAME.cu`` (or ``NAME.cpp``, or a folder ``NAME/``) has its reference beside it in
``kernels/NAME.ref.py``:

- required: ``SIZES``, ``inputs(size, seed, device) -> dict``, ``reference(inputs)``,
  ``run(module, inputs)``;
- optional: ``SEEDS`` (default ``[0]``), ``TOLERANCE`` (``{"rtol": ..., "atol": ...}``),
  ``VARIANTS`` (faster versions, name → run function; ``run`` may be one of them, which is then
  checked and timed once, as ``original = NAME``), ``VARIANT_SIZES`` (their sizes, default
  ``SIZES``), ``VARIANT_INPUTS`` and ``VARIANT_TOLERANCE`` (name → the ``inputs`` function and the
  tolerance of a version that takes other inputs, a bfloat16 kernel beside fp16 ones),
  ``BENCH_SIZES`` (default: the largest size), ``ORIGINAL_MAX_SIZE`` (the original version is not
  timed above it, unless it is a variant), ``bytes_moved(inputs)`` and ``flops(inputs)`` (GB/s, FLOP/s and
  the roofline).

Every other module reads a reference through :func:`load`'s :class:`Ref`, never with ``getattr``.
"""

from __future__ import annotations

import functools
import importlib.util
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Callable, Iterator

import torch

from jitlab import config
from jitlab.errors import JitlabError, SnippetError
from jitlab.jit.sources import collect_sources
from jitlab.judge import checker


@dataclass
class Kernel:
    """A kernel snippet and its reference file."""

    name: str
    path: Path
    ref: Path

    @property
    def is_cuda(self) -> bool:
        files = [self.path] if self.path.is_file() else list(self.path.iterdir())
        return any(f.suffix in config.CUDA_EXTS for f in files)


#: A T4's SMs and threads per SM (Colab's GPU): the machine a ref sizes its grid for on the CPU emulator.
T4_SMS = (40, 1024)


def sm_layout(device) -> tuple[int, int]:
    """``(SMs, threads per SM)`` of the GPU ``device`` is on, for refs that size a grid to the machine
    (a grid-stride launch, a wave of blocks); a T4's where there is no GPU (the CPU emulator)."""
    if torch.device(device).type != "cuda":
        return T4_SMS
    props = torch.cuda.get_device_properties(device)
    return props.multi_processor_count, props.max_threads_per_multi_processor


def find_kernels(*roots: str | Path) -> list[Kernel]:
    """Snippets with a ``.ref.py`` beside them: every one under a folder, or the ones named.

    Raises:
        JitlabError: A named snippet has no reference (the message names the file expected).
    """
    found: list[Kernel] = []
    for root in roots or ("kernels",):
        root = Path(root)
        if not root.exists():
            raise JitlabError(f"{root}: no such file or folder")
        if root.is_dir() and not (root.parent / f"{root.name}.ref.py").is_file():
            found += [k for k in map(kernel_for, sorted(root.glob("*.ref.py"))) if k]
        else:
            ref = root.parent / f"{root.name.split('.')[0]}.ref.py"
            k = kernel_for(ref) if ref.is_file() else None
            if k is None:
                raise JitlabError(f"{root}: no reference found (expected {ref}); see kernels/*.ref.py for the format")
            found.append(k)
    return found


def kernel_for(ref: Path) -> Kernel | None:
    """The snippet a ``NAME.ref.py`` belongs to (``NAME/``, ``NAME.cu``, ``NAME.cpp``…), or None."""
    name = ref.name[: -len(".ref.py")]
    cands = [ref.parent / name] + [ref.parent / f"{name}{ext}" for ext in config.SOURCE_EXTS]
    path = next((c for c in cands if c.exists()), None)
    return Kernel(name, path, ref) if path else None


def path_for(snippet: str | Path, ref: str | Path | None = None) -> Path:
    """The ``.ref.py`` of a snippet (``ref`` when given).

    Raises:
        SnippetError: No such snippet (with a did-you-mean), or no reference (naming the file expected).
    """
    collect_sources(snippet)  # a missing or misspelled snippet says so first
    if ref is not None:
        if not Path(ref).is_file():
            raise SnippetError(f"{ref}: no such reference file")
        return Path(ref)
    try:
        return find_kernels(snippet)[0].ref
    except JitlabError as e:
        raise SnippetError(str(e)) from None


@dataclass(frozen=True)
class Version:
    """One version of a kernel: ``original`` (``run``) or a ``VARIANTS`` entry, with its check sizes,
    its inputs and its tolerance (the ref's own unless ``VARIANT_INPUTS``/``VARIANT_TOLERANCE`` say).

    ``alias`` is the ``VARIANTS`` name of the original when ``run`` is one of the variants (sgemm's
    ``run = run6``): that variant is this version, checked and timed once, as ``original``.
    """

    name: str
    run: Callable
    sizes: list
    inputs: Callable
    tolerance: dict | None = None
    alias: str | None = None

    @property
    def label(self) -> str:
        """How tables name it: ``"sgemm_kernel1"``, ``"original"``, or ``"original = sgemm_kernel6"``."""
        return f"{self.name} = {self.alias}" if self.alias else self.name


class Ref:
    """A loaded ``.ref.py``: the contract's fields with their defaults, and the module for the rest."""

    def __init__(self, module: ModuleType, path: Path):
        self.module, self.path = module, path
        self.sizes = list(module.SIZES)
        self.seeds = list(getattr(module, "SEEDS", [0]))
        self.tolerance: dict | None = getattr(module, "TOLERANCE", None)
        self.inputs = module.inputs
        self.reference = module.reference
        self.run = module.run
        self.bytes_moved = getattr(module, "bytes_moved", None)
        self.flops = getattr(module, "flops", None)
        self.bench_sizes: list | None = list(module.BENCH_SIZES) if hasattr(module, "BENCH_SIZES") else None
        self.original_max_size = getattr(module, "ORIGINAL_MAX_SIZE", None)
        variant_sizes = list(getattr(module, "VARIANT_SIZES", self.sizes))
        variants = dict(getattr(module, "VARIANTS", {}))
        inputs, tolerance = dict(getattr(module, "VARIANT_INPUTS", {})), dict(getattr(module, "VARIANT_TOLERANCE", {}))
        unknown = sorted((set(inputs) | set(tolerance)) - set(variants))
        if unknown:
            raise SnippetError(f"{path}: VARIANT_INPUTS/VARIANT_TOLERANCE name {', '.join(map(repr, unknown))}, "
                               f"not in VARIANTS ({', '.join(variants) or 'none'})")
        found = [Version(name, fn, variant_sizes, inputs.get(name, self.inputs), tolerance.get(name, self.tolerance))
                 for name, fn in variants.items()]
        alias = next((v for v in found if (v.run, v.inputs, v.tolerance) == (module.run, self.inputs, self.tolerance)),
                     None)
        sizes = list(dict.fromkeys(self.sizes + alias.sizes)) if alias else self.sizes
        self.versions = [Version("original", module.run, sizes, self.inputs, self.tolerance,
                                 alias.name if alias else None)] + [v for v in found if v is not alias]

    def version(self, name: str) -> Version:
        """The version called ``name``.

        Raises:
            SnippetError: No such version (the message lists them).
        """
        for v in self.versions:
            if name in (v.name, v.alias):
                return v
        raise SnippetError(f"{self.path}: no version {name!r} (versions: {', '.join(v.name for v in self.versions)})")

    def timed_sizes(self, version: Version, max_size=None) -> list:
        """The sizes a version is timed at: ``BENCH_SIZES`` (the original's capped at
        ``ORIGINAL_MAX_SIZE``), else its largest check size; none above ``max_size``."""
        checked = [s for s in version.sizes if max_size is None or s <= max_size] or version.sizes[:1]
        limit = self.original_max_size if version.name == "original" and not version.alias else None
        declared = [s for s in self.bench_sizes or [] if limit is None or s <= limit]
        return [s for s in declared or [max(checked)] if max_size is None or s <= max_size]

    def bench_plan(self) -> list[tuple[Version, object]]:
        """``(version, size)`` for every timing ``jitlab run`` and the panel's Bench make."""
        return [(v, size) for v in self.versions for size in self.timed_sizes(v)]

    def ab_size(self):
        """The size an A/B comparison times the original version at: its largest timed size."""
        return max(self.timed_sizes(self.versions[0]))

    def __getattr__(self, name):  # the rest of the module: an exercise's TITLE, a helper the notebook uses
        if name == "module":  # not set yet (copy, pickle): no recursion
            raise AttributeError(name)
        return getattr(self.module, name)


def load(path: str | Path) -> Ref:
    """Import a ``.ref.py`` file.

    Raises:
        SnippetError: It lacks a required name (``SIZES``, ``inputs``, ``reference``, ``run``).
    """
    path = Path(path)
    spec = importlib.util.spec_from_file_location(f"jitlab_ref_{path.name[:-7].replace('.', '_')}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    missing = [n for n in ("SIZES", "inputs", "reference", "run") if not hasattr(module, n)]
    if missing:
        raise SnippetError(f"{path}: defines no {', '.join(missing)}; a reference needs SIZES, inputs(size, seed, "
                           f"device), reference(inputs) and run(module, inputs) (see kernels/*.ref.py)")
    return Ref(module, path)


def check_each(module, ref: Ref, device: str, *, name: str, versions: list[Version] | None = None,
               sizes: list | None = None, max_size=None, wrap: Callable | None = None
               ) -> Iterator[tuple[Version, checker.Verdict]]:
    """Check versions of a built kernel against the reference, one at a time (``jitlab run``, the
    worker and the panel all check this way).

    Args:
        module: The built snippet the run functions call.
        name: The kernel's name, for the verdicts (``NAME/version``).
        versions: Which (default: all of them, the original first).
        sizes: Sizes for every version instead of each one's own.
        max_size: Leave out larger sizes (the smallest is kept if none is left).
        wrap: Applied to each bound run function (``jitlab run`` keeps printing kernels quiet).

    Yields:
        ``(version, verdict)`` as each version is checked; stop iterating to stop checking.
    """
    for v in versions or ref.versions:
        run = functools.partial(v.run, module)
        chosen = sizes or [s for s in v.sizes if max_size is None or s <= max_size] or v.sizes[:1]
        yield v, checker.check(wrap(run) if wrap else run, ref.reference, v.inputs, sizes=chosen, seeds=ref.seeds,
                               device=device, tolerance_override=v.tolerance, name=f"{name}/{v.name}")
