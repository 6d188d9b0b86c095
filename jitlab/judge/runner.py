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
from jitlab.judge import benchmark, refs, results, roofline


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
        row = {"kernel": k.name, "variant": version.label, "kind": mod.build.plan.kind, "build": built}
        if not v.passed:
            emit({**row, "status": "FAIL", "detail": "; ".join(v.reasons)[:160], "verdict": v})
            continue
        if not time_it:
            emit({**row, "status": "ok", "detail": f"sizes {', '.join(map(str, sorted({c.size for c in v.cases})))}"})
            continue
        run = _quiet(functools.partial(version.run, mod))
        for size in ref.timed_sizes(version, max_size):
            with progress.Step(f"timing {k.name} {version.name} at size {size}"):
                r = benchmark.bench(run, version.inputs, size, reference=ref.reference, bytes_moved=ref.bytes_moved,
                          flops=ref.flops, device=device, compile_reference=compile_reference and device == "cuda",
                          tolerance_override=version.tolerance, name=version.label)
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

    row = {"kernel": k.name, "variant": "", "compile_only": True}
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
    if time_it and any(not k.is_cuda for k in kernels):  # C++ kernels run on the CPU, GPU or not
        n = benchmark.CPU_THREADS
        print(f"CPU timings: the kernel and torch eager with {n} thread{'s' if n != 1 else ''} each "
              f"(torch.set_num_threads); a ratio inside the noise, or on a busy machine, is no verdict")
    table = Table.for_kernels(kernels, compiled=gpu and compile_reference and time_it)
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
    print("\n" + summary(rows, archs, time_it))
    if any(r.get("result") for r in rows):
        print(f"results and plots: {results.results_dir()}")
    return sum(failed for _, failed in _tally(rows).values())


def _tally(rows: list[dict]) -> dict[str, tuple[int, int]]:
    """``{"ran": (kernels, failed), "compiled": (kernels, failed)}``: a kernel fails if any of its rows does."""
    kinds: dict[str, dict[str, bool]] = {"ran": {}, "compiled": {}}
    for r in rows:
        kind = "compiled" if r.get("compile_only") else "ran"
        kinds[kind][r["kernel"]] = kinds[kind].get(r["kernel"], False) or r["status"] == "FAIL"
    return {kind: (len(seen), sum(seen.values())) for kind, seen in kinds.items()}


def summary(rows: list[dict], archs, time_it: bool = True) -> str:
    """The run's last line, counting kernels: ``3 kernels checked and timed: 3 passed, 0 failed;
    16 kernels compile-checked for sm_75, sm_80, sm_90: 16 compiled, 0 failed``. A compile-checked
    kernel ran nothing, so it is never counted as passed."""
    tally = _tally(rows)
    (ran, ran_failed), (compiled, compile_failed) = tally["ran"], tally["compiled"]

    def kernels(n: int) -> str:
        return f"{n} kernel{'s' if n != 1 else ''}"

    parts = []
    if ran or not compiled:
        parts.append(f"{kernels(ran)} checked{' and timed' if time_it else ''}: {ran - ran_failed} passed, "
                     f"{ran_failed} failed")
    if compiled:
        parts.append(f"{kernels(compiled)} compile-checked for {', '.join(archs)} (nothing CUDA ran): "
                     f"{compiled - compile_failed} compiled, {compile_failed} failed")
    return "; ".join(parts)


#: The table's columns. "throughput" is GB/s for a memory-bound kernel and TFLOP/s for a
#: compute-bound one, "% of roof" the share of the roof it is under ("97% copy", "62% fp32 matmul").
#: The ratio columns are the other code's median time over the kernel's, so they read "× faster
#: than torch", with the range the quartiles give: ``1.64× (1.52–1.77)``, below 1
#: ``0.31× (0.29–0.33; 3.23× slower)``, or no verdict, saying why (:class:`benchmark.Comparison`).
HEADER = ["kernel", "variant", "verdict", "size", "time", "throughput", "% of roof", "× faster than torch",
          "× faster than compile", "build", "detail"]


def _cells(r: dict) -> list[str]:
    res = r.get("result")
    t = res.timing if res else None
    tp = res.throughput if res else None
    vs = [c.cell() if c else "" for c in ((res.torch, res.compiled) if res else (None, None))]
    return [r["kernel"], r.get("variant", ""), r["status"], str(r.get("size", "")),
            str(t).split(" (")[0] if t else "", str(tp) if tp else "", tp.of_roof if tp else "", *vs,
            r.get("build", ""), r.get("detail", "")]


class Table:
    """The run's table, printed a line at a time (so its widths are set before the first row).

    A cell wider than its column pushes that row's later cells right and widens the column for
    the rows after it.
    """

    def __init__(self, widths: list[int], compiled: bool = True):
        self.widths = [max(len(h), w) for h, w in zip(HEADER, widths)]
        self.shown = [i for i, h in enumerate(HEADER) if compiled or h != "× faster than compile"]

    @classmethod
    def for_kernels(cls, kernels: list[refs.Kernel], compiled: bool = True) -> Table:
        """Widths for these kernels' rows: versions are named ``<op>_kernelN``, times like ``123.4 µs``;
        without ``compiled`` (no torch.compile timings: CPU, ``--no-bench``) that column is left out."""
        name = max(len(k.name) for k in kernels)
        ratio = max(map(len, ("0.06× (0.05–0.07; 16.91× slower)", "within noise: no verdict (0.80–1.30×)",
                              "machine busy: no verdict (load 12.3 on 16 cores)")))
        return cls([name, name + len("_kernel1"), len("compiled"), len("268435456"), len("123.45 ms"),
                    len("41.3 TFLOP/s"), len("62% fp32 matmul"), ratio, ratio, len("123.4 s"), 0], compiled)

    def print_header(self) -> None:
        self._print(HEADER)

    def print_row(self, row: dict) -> None:
        cells = _cells(row)
        self._print(cells)
        self.widths = [max(w, len(c)) for w, c in zip(self.widths, cells)]

    def _print(self, cells: list[str]) -> None:
        # flush: the rows are the progress of `jitlab run`, also when stdout is a pipe
        print("  ".join(cells[i].ljust(self.widths[i]) for i in self.shown).rstrip(), flush=True)


def print_table(rows: list[dict]) -> None:
    """Print rows measured before as one table, each column as wide as its widest cell."""
    cells = [_cells(r) for r in rows]
    table = Table([max([0, *(len(c[i]) for c in cells)]) for i in range(len(HEADER))])
    table.print_header()
    for r in rows:
        table.print_row(r)
