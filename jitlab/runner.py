"""``jitlab run``: build, check and time every kernel against its torch reference; print one table,
a row at a time as each is measured (the header first).

A kernel ``kernels/NAME.cu`` (or ``NAME.cpp``, or a folder ``NAME/``) has its reference beside it in
``kernels/NAME.ref.py``: ``SIZES``, ``inputs(size, seed, device)``, ``reference(inputs)``,
``run(module, inputs)`` and optionally ``SEEDS``, ``TOLERANCE``, ``VARIANTS`` (faster versions),
``VARIANT_SIZES``, ``BENCH_SIZES``, ``ORIGINAL_MAX_SIZE`` (the original version is not timed
above it), ``bytes_moved(inputs)``, ``flops(inputs)``.
With a GPU every kernel is checked and timed; without one the C++ kernels run on the CPU and the
CUDA kernels are compile-checked for the named archs.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import io
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from . import config, progress, results, toolchain
from .errors import JitlabError

DEFAULT_ARCHS = ("sm_75", "sm_80", "sm_90")


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


def find_kernels(*roots: str | Path) -> list[Kernel]:
    """Snippets with a ``.ref.py`` beside them: every one under a folder, or the ones named."""
    found: list[Kernel] = []
    for root in roots or ("kernels",):
        root = Path(root)
        if root.is_dir() and not (root.parent / f"{root.name}.ref.py").is_file():
            for ref in sorted(root.glob("*.ref.py")):
                k = _kernel_for(ref)
                if k:
                    found.append(k)
        else:
            ref = root.parent / f"{root.name.split('.')[0]}.ref.py"
            k = _kernel_for(ref) if ref.is_file() else None
            if k is None:
                raise JitlabError(f"{root}: no reference found (expected {ref}); see kernels/*.ref.py for the format")
            found.append(k)
    return found


def _kernel_for(ref: Path) -> Kernel | None:
    name = ref.name[: -len(".ref.py")]
    cands = [ref.parent / name] + [ref.parent / f"{name}{ext}" for ext in config.SOURCE_EXTS]
    path = next((c for c in cands if c.exists()), None)
    return Kernel(name, path, ref) if path else None


def load_reference(ref: Path):
    """Import a ``.ref.py`` file as a module."""
    spec = importlib.util.spec_from_file_location(f"jitlab_ref_{ref.name[:-7].replace('.', '_')}", ref)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def variants(ref) -> list[tuple[str, object, list[int]]]:
    """``(name, run, sizes)`` for the original version and each faster one."""
    out = [("original", ref.run, list(ref.SIZES))]
    for name, fn in getattr(ref, "VARIANTS", {}).items():
        out.append((name, fn, list(getattr(ref, "VARIANT_SIZES", ref.SIZES))))
    return out


def _quiet(fn):
    """Kernels that printf stay out of the table."""

    @functools.wraps(fn)
    def call(*a, **kw):
        with contextlib.redirect_stdout(io.StringIO()):
            return fn(*a, **kw)

    return call


def run_kernel(k: Kernel, device: str, *, time_it: bool = True, compile_reference: bool = True,
               max_size: int | None = None, on_row=None) -> list[dict]:
    """Build one kernel, check every variant, and time the ones that pass; one row per variant and size.

    Args:
        on_row: Called with each row as soon as it is measured (``jitlab run`` prints it then).
    """
    import jitlab
    from .benchmark import bench
    from .checker import check

    rows: list[dict] = []

    def emit(row: dict) -> None:
        rows.append(row)
        if on_row is not None:
            on_row(row)

    t0 = time.perf_counter()
    try:
        mod = jitlab.load(k.path)
    except JitlabError as e:
        emit({"kernel": k.name, "variant": "", "status": "FAIL", "detail": str(e).splitlines()[0]})
        return rows
    built = "cached" if mod.build.cached else f"{time.perf_counter() - t0:.1f} s"
    ref = load_reference(k.ref)
    tol = getattr(ref, "TOLERANCE", None)
    for vname, fn, sizes in variants(ref):
        run = _quiet(functools.partial(fn, mod))
        sizes = [s for s in sizes if max_size is None or s <= max_size] or sizes[:1]
        row = {"kernel": k.name, "variant": vname, "kind": mod.build.plan.kind, "build": built}
        with progress.Step(f"checking {k.name} {vname}"):  # a live line only: the rows say the rest
            v = check(run, ref.reference, ref.inputs, sizes=sizes, seeds=getattr(ref, "SEEDS", [0]), device=device,
                      tolerance_override=tol, name=f"{k.name}/{vname}")
        if not v.passed:
            emit({**row, "status": "FAIL", "detail": "; ".join(v.reasons)[:160], "verdict": v})
            continue
        if not time_it or not hasattr(ref, "reference"):
            emit({**row, "status": "ok", "detail": f"sizes {', '.join(map(str, sizes))}"})
            continue
        limit = getattr(ref, "ORIGINAL_MAX_SIZE", None) if vname == "original" else None
        bench_sizes = [s for s in getattr(ref, "BENCH_SIZES", [max(sizes)]) if limit is None or s <= limit]
        for size in bench_sizes or [max(sizes)]:
            if max_size is not None and size > max_size:
                continue
            with progress.Step(f"timing {k.name} {vname} at size {size}"):
                r = bench(run, ref.inputs, size, reference=ref.reference,
                          bytes_moved=getattr(ref, "bytes_moved", None), flops=getattr(ref, "flops", None),
                          device=device, compile_reference=compile_reference and device == "cuda",
                          tolerance_override=tol, name=vname)
            rec = r.to_dict()
            results.append(k.name, {**rec, "build": mod.build.name})
            emit({**row, "status": "ok" if r.verdict.passed else "FAIL", "size": size, "result": r,
                  "detail": "" if r.verdict.passed else "; ".join(r.verdict.reasons)[:160]})
    timed = [r["result"].to_dict() for r in rows if r.get("result") and r["result"].timing]
    if timed:
        peak = rows[0]["result"].peak if rows[0].get("result") else None
        results.plot(k.name, timed, (peak or {}).get("copy_gbps"))
    return rows


def compile_kernel(k: Kernel, archs: tuple[str, ...]) -> list[dict]:
    """Compile-check one CUDA kernel for ``archs`` and summarize its resource usage."""
    import jitlab

    row = {"kernel": k.name, "variant": ""}
    t0 = time.perf_counter()
    try:
        b = jitlab.build(k.path, compile_only=True, arch=list(archs))
    except JitlabError as e:
        return [{**row, "status": "FAIL", "detail": str(e).splitlines()[0]}]
    regs = ", ".join(
        f"{kern}: {max(a['registers'] for a in per.values())} regs" for kern, per in sorted(b.resources.items())
    )
    return [{**row, "kind": b.plan.kind, "build": "cached" if b.cached else f"{time.perf_counter() - t0:.1f} s",
             "status": "compiled", "detail": regs or "compiled"}]


def main(paths=(), archs: tuple[str, ...] = DEFAULT_ARCHS, max_size: int | None = None, time_it: bool = True,
         compile_reference: bool = True) -> int:
    """Run every kernel, printing the table a row at a time as each is measured; returns the number of failures."""
    kernels = find_kernels(*paths)
    if not kernels:
        print(f"no kernels with a .ref.py found in {', '.join(map(str, paths)) or 'kernels/'}")
        return 1
    gpu = toolchain.gpu_available()
    if gpu:
        import torch

        print(f"GPU: {torch.cuda.get_device_name()} ({toolchain.current_arch()}), torch {torch.__version__}")
    else:
        print(f"no CUDA GPU found: running the C++ kernels on CPU and compile-checking the CUDA kernels "
              f"for {', '.join(archs)} (nothing CUDA runs here)")
    table = Table.for_kernels(kernels)
    table.print_header()
    rows: list[dict] = []

    def show(row: dict) -> None:
        rows.append(row)
        table.print_row(row)

    for k in kernels:
        if gpu or not k.is_cuda:
            run_kernel(k, "cuda" if gpu and k.is_cuda else "cpu", time_it=time_it,
                       compile_reference=compile_reference and gpu, max_size=max_size, on_row=show)
    if not gpu:
        with ThreadPoolExecutor(max_workers=2) as pool:  # in order, each printed once it and those before are done
            for compiled in pool.map(lambda k: compile_kernel(k, archs), [k for k in kernels if k.is_cuda]):
                for row in compiled:
                    show(row)
    failed = sum(r["status"] == "FAIL" for r in rows)
    print(f"\n{len(rows) - failed} passed, {failed} failed")
    if any(r.get("result") for r in rows):
        print(f"results and plots: {results.results_dir()}")
    return failed


#: The table's columns. The ratio columns are the other code's median time over the kernel's, so
#: they read "× faster than torch": ``1.64×``, or below 1 ``0.31× (3.23× slower)``.
HEADER = ["kernel", "variant", "verdict", "size", "time", "GB/s", "% peak", "× faster than torch",
          "× faster than compile", "build", "detail"]


def _cells(r: dict) -> list[str]:
    from .benchmark import times_faster

    res = r.get("result")
    t = res.timing if res else None

    def f(x, fmt):
        return fmt.format(x) if x is not None else ""

    return [r["kernel"], r.get("variant", ""), r["status"], str(r.get("size", "")),
            str(t).split(" (")[0] if t else "", f(res.gbps if res else None, "{:.0f}"),
            f(res.pct_peak if res else None, "{:.0f}%"), times_faster(res.vs_torch if res else None),
            times_faster(res.vs_compile if res else None), r.get("build", ""), r.get("detail", "")]


class Table:
    """The run's table, printed a line at a time (so its widths are set before the first row).

    A cell wider than its column pushes that row's later cells right and widens the column for
    the rows after it.
    """

    def __init__(self, widths: list[int]):
        self.widths = [max(len(h), w) for h, w in zip(HEADER, widths)]

    @classmethod
    def for_kernels(cls, kernels: list[Kernel]) -> Table:
        """Widths for these kernels' rows: versions are named ``<op>_kernelN``, times like ``123.4 µs``."""
        name = max(len(k.name) for k in kernels)
        return cls([name, name + len("_kernel1"), len("compiled"), len("268435456"), len("123.45 ms"), 5, 6,
                    len("0.06× (16.91× slower)"), len("0.06× (16.91× slower)"), len("123.4 s"), 0])

    def print_header(self) -> None:
        self._print(HEADER)

    def print_row(self, row: dict) -> None:
        cells = _cells(row)
        self._print(cells)
        self.widths = [max(w, len(c)) for w, c in zip(self.widths, cells)]

    def _print(self, cells: list[str]) -> None:
        # flush: the rows are the progress of `jitlab run`, also when stdout is a pipe
        print("  ".join(c.ljust(w) for c, w in zip(cells, self.widths)).rstrip(), flush=True)


def print_table(rows: list[dict]) -> None:
    """Print rows measured before as one table, each column as wide as its widest cell."""
    cells = [_cells(r) for r in rows]
    table = Table([max([0, *(len(c[i]) for c in cells)]) for i in range(len(HEADER))])
    table.print_header()
    for r in rows:
        table.print_row(r)
