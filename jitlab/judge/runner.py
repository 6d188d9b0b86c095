"""``jitlab run``: build, check and time every kernel against its torch reference; print one table,
a row at a time as each is measured (the header first).

Every kernel with a ``NAME.ref.py`` beside it (the contract: :mod:`jitlab.judge.refs`) is built,
each of its versions checked, and the ones that pass timed beside torch.
With a GPU every kernel is checked and timed; without one the C++ kernels run on the CPU and the
CUDA kernels are compile-checked for the named archs.
"""

from __future__ import annotations

import contextlib
import functools
import io
import time
from concurrent.futures import ThreadPoolExecutor

from jitlab import config, progress
from jitlab.errors import JitlabError
from jitlab.jit import api, toolchain
from jitlab.judge import refs, results, roofline


def _quiet(fn):
    """Kernels that printf stay out of the table."""

    @functools.wraps(fn)
    def call(*a, **kw):
        with contextlib.redirect_stdout(io.StringIO()):
            return fn(*a, **kw)

    return call


def run_kernel(k: refs.Kernel, device: str, *, time_it: bool = True, compile_reference: bool = True,
               max_size: int | None = None, on_row=None) -> list[dict]:
    """Build one kernel, check every variant, and time the ones that pass; one row per variant and size.

    Args:
        on_row: Called with each row as soon as it is measured (``jitlab run`` prints it then).
    """
    from jitlab.judge.benchmark import bench

    rows: list[dict] = []

    def emit(row: dict) -> None:
        rows.append(row)
        if on_row is not None:
            on_row(row)

    t0 = time.perf_counter()
    try:
        mod = api.load(k.path)
    except JitlabError as e:
        emit({"kernel": k.name, "variant": "", "status": "FAIL", "detail": str(e).splitlines()[0]})
        return rows
    built = "cached" if mod.build.cached else f"{time.perf_counter() - t0:.1f} s"
    ref = refs.load(k.ref)
    for version in ref.versions:
        with progress.Step(f"checking {k.name} {version.name}"):  # a live line only: the rows say the rest
            _, v = next(refs.check_each(mod, ref, device, name=k.name, versions=[version], max_size=max_size,
                                        wrap=_quiet))
        row = {"kernel": k.name, "variant": version.name, "kind": mod.build.plan.kind, "build": built}
        if not v.passed:
            emit({**row, "status": "FAIL", "detail": "; ".join(v.reasons)[:160], "verdict": v})
            continue
        if not time_it:
            emit({**row, "status": "ok", "detail": f"sizes {', '.join(map(str, sorted({c.size for c in v.cases})))}"})
            continue
        run = _quiet(functools.partial(version.run, mod))
        for size in ref.timed_sizes(version, max_size):
            with progress.Step(f"timing {k.name} {version.name} at size {size}"):
                r = bench(run, version.inputs, size, reference=ref.reference, bytes_moved=ref.bytes_moved,
                          flops=ref.flops, device=device, compile_reference=compile_reference and device == "cuda",
                          tolerance_override=version.tolerance, name=version.name)
            results.append(k.name, {**r.to_dict(), "build": mod.build.name})
            emit({**row, "status": "ok" if r.verdict.passed else "FAIL", "size": size, "result": r,
                  "detail": "" if r.verdict.passed else "; ".join(r.verdict.reasons)[:160]})
    timed = [r["result"].to_dict() for r in rows if r.get("result") and r["result"].timing]
    if timed:
        peak = rows[0]["result"].peak if rows[0].get("result") else None
        results.plot(k.name, timed, (peak or {}).get("copy_gbps"))
        placed = [r["result"] for r in rows if r.get("result")]
        if any(r.flops and r.bytes_moved and r.timing for r in placed) and peak:
            roofline.Chart(placed, peak, f"{k.name}: roofline").save(results.results_dir() / f"{k.name}.roofline.png")
    return rows


def compile_kernel(k: refs.Kernel, archs: tuple[str, ...]) -> list[dict]:
    """Compile-check one CUDA kernel for ``archs`` and summarize its resource usage."""

    row = {"kernel": k.name, "variant": ""}
    t0 = time.perf_counter()
    try:
        b = api.build(k.path, compile_only=True, arch=list(archs))
    except JitlabError as e:
        return [{**row, "status": "FAIL", "detail": str(e).splitlines()[0]}]
    regs = ", ".join(
        f"{kern}: {max(a['registers'] for a in per.values())} regs" for kern, per in sorted(b.resources.items())
    )
    return [{**row, "kind": b.plan.kind, "build": "cached" if b.cached else f"{time.perf_counter() - t0:.1f} s",
             "status": "compiled", "detail": regs or "compiled"}]


def main(paths=(), archs: tuple[str, ...] = config.DEFAULT_ARCHS, max_size: int | None = None, time_it: bool = True,
         compile_reference: bool = True) -> int:
    """Run every kernel, printing the table a row at a time as each is measured; returns the number of failures."""
    kernels = refs.find_kernels(*paths)
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
    from jitlab.judge.benchmark import times_faster

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
    def for_kernels(cls, kernels: list[refs.Kernel]) -> Table:
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
