"""``jitlab tune``: sweep a snippet's ``#define``s over sizes, on every GPU given, and keep the best.

The sweep, in order:

1. **Plan.** The space (:class:`jitlab.judge.space.Space`: the ref's ``TUNE`` and the call's overrides),
   every configuration within ``budget``, else a search (:class:`jitlab.judge.search.Search`) that
   chooses ``budget`` of them round by round, from a model of the timings so far; each worker is
   probed for its device (model and driver, arch). Points the results store already holds for that
   device model are skipped: a rerun of a finished sweep runs nothing.
2. **Prune, then build.** A configuration whose launch no device allows (threads per block, dynamic
   shared memory) is recorded as pruned without compiling; the others are built in parallel on CPU
   workers (content-keyed like every build, so a rebuild is a cache hit), and a build whose registers or
   shared memory the arch cannot hold, or that ptxas refuses for its limits, is recorded as pruned too.
3. **Check, then time.** Each device model's points go to its workers, one job at a time per device:
   load the build (a cache hit), check it at the size against the reference, time it if it is right.
   torch eager and ``torch.compile`` are timed once per size and device model. Every point's record is
   appended to the store as it ends, so a killed sweep resumes where it stopped.
4. **Report** the best right configuration per size and device model, its % of roofline and its ratio
   to torch; export the table (``NAME.tuned.json``) and a chart.

``gpus`` picks local devices (one worker process each); ``cluster`` takes the same jobs to Dask
(:mod:`jitlab.worker.dask_pool`).
"""

from __future__ import annotations

import importlib.util
import json
import math
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Callable

from jitlab import config
from jitlab.errors import CompileError, ToolchainError
from jitlab.jit import api
from jitlab.jit.sources import has_cuda, locate
from jitlab.judge import refs, results, tunestore
from jitlab.judge.search import Search
from jitlab.judge.space import Limits, Space, compile_prune_reason, config_key, kernel_hash, launch_reason, prune
from jitlab.judge.tunereport import TuneReport, tuned_path
from jitlab.judge.tunestore import Record, Store
from jitlab.worker import jobs
from jitlab.worker.jobs import Job, Outcome
from jitlab.worker.pool import LocalPool, Slot, local_slots

#: An outcome's category → the record's status (any other category is a failure with its reason).
_STATUS = {jobs.MISMATCH: tunestore.WRONG, jobs.TIMEOUT: tunestore.TIMEOUT, jobs.CRASH: tunestore.CRASHED}


@dataclass
class Built:
    """A configuration's build, as a CPU worker reports it (picklable: it may come from a Dask worker).

    Attributes:
        resources: The build's resource table (:attr:`jitlab.jit.plan.Build.resources`).
        error: The compile error's first lines, when it did not compile.
        pruned: The ptxas line, when the compiler refused it for the arch's limits.
        cached: Whether the build was a cache hit.
    """

    resources: dict = field(default_factory=dict)
    error: str = ""
    pruned: str = ""
    cached: bool = False


def build_config(path: str, item: tuple[dict, str | None]) -> Built:
    """Build one ``(config, arch)`` as the workers will load it (same options, so the same key)."""
    defines, arch = item
    try:
        b = api.build(path, defines=defines, arch=arch)
    except CompileError as e:
        text = e.log or str(e)
        return Built(error="\n".join(str(e).splitlines()[:3]), pruned=compile_prune_reason(text) or "")
    return Built(b.resources, cached=b.cached)


def make_pool(cuda: bool, gpus, cluster: str | None, timing: bool = True, lanes: int = 1):
    """The pool a sweep (or a batch check: ``timing=False``) runs on: Dask for ``cluster`` (``"local"`` or
    ``tcp://…``), else local worker processes, ``lanes`` per device (:func:`jitlab.worker.pool.local_slots`).

    Raises:
        ToolchainError: A CUDA snippet, no ``gpus`` given, and no CUDA GPU here.
    """
    if cluster and cluster != "local":  # a scheduler's workers bring their own GPUs
        return dask_pool().connect(cluster, timing)
    if gpus is None:
        import torch  # lazy: only a sweep that must count this machine's GPUs needs it

        gpus = torch.cuda.device_count() if cuda else 1
        if not gpus:
            raise ToolchainError("no CUDA GPU found: each configuration (or submission) runs on a GPU; run this on "
                                 "a GPU machine, or pass cluster='tcp://...' (a Dask scheduler whose workers have GPUs)")
    if cluster:
        return dask_pool().local(gpus, timing)
    return LocalPool(local_slots(gpus, timing, lanes))


def dask_pool():
    """:class:`jitlab.worker.dask_pool.DaskPool`, imported when a cluster is asked for.

    Raises:
        ToolchainError: Dask distributed is not installed (the message says how to install it).
    """
    if importlib.util.find_spec("distributed") is None:
        raise ToolchainError("--cluster runs on Dask distributed, which is not installed: "
                             "pip install distributed (or jitlab[dask])")
    from jitlab.worker.dask_pool import DaskPool  # lazy: Dask is optional, and costs a second to import

    return DaskPool


class Sweep:
    """One call of :func:`tune`: its space, its devices, its store, and what it has recorded so far."""

    def __init__(self, path: Path, ref_path: Path, space: Space, store: Store, *, explicit_ref: bool,
                 rep_s: float, on_record: Callable[[Record], None] | None):
        self.path, self.ref_path, self.space, self.store = path, ref_path, space, store
        self.explicit_ref, self.rep_s, self.on_record = explicit_ref, rep_s, on_record
        self.kernel = kernel_hash(path, ref_path)
        self.cuda = has_cuda(path)
        self.measured = 0

    def record(self, rec: Record) -> None:
        self.store.append(rec)
        self.measured += rec.config is not None  # configurations' points; torch's baselines are not counted
        if self.on_record:
            self.on_record(rec)

    def todo(self, configs: list[dict], models: dict[str, Slot]) -> tuple[dict[str, list], int]:
        """The points each device model still needs, and how many are known. A model's torch baselines
        (config None) come first, as one point whose size is the list of sizes still to time: one worker
        pays ``torch.compile``'s start-up (seconds) for all of them, while the others start on the short
        points that even out the GPUs' ends."""
        known = self.store.known(self.kernel)
        todo: dict[str, list] = {}
        skipped = 0
        for model in models:
            sizes = [s for s in self.space.sizes if Record(self.kernel, None, s, model, "").key not in known]
            points = [(None, sizes)] if sizes else []
            for size in self.space.sizes:
                for c in configs:
                    if Record(self.kernel, c, size, model, "").key in known:
                        skipped += 1
                    else:
                        points.append((c, size))
            if points:
                todo[model] = points
        return todo, skipped

    def times(self, models: dict[str, Slot]) -> dict[tuple, dict[str, float]]:
        """Per (device model, size), each right configuration's median time so far (what a search steers by)."""
        times: dict[tuple, dict[str, float]] = {}
        for r in self.store.known(self.kernel).values():
            if r.config is not None and r.status == tunestore.OK and r.median_ms and r.device in models:
                times.setdefault((r.device, r.size), {})[config_key(r.config)] = r.median_ms
        return times

    def prune_and_build(self, pool, todo: dict[str, list], models: dict[str, Slot]) -> dict[str, list]:
        """Record what no device can run or what does not build; return the points left to time."""
        archs = {model: slot.arch for model, slot in models.items()}
        wanted = {}
        for model, points in todo.items():
            for c, _ in points:
                if c is not None:
                    wanted[(config_key(c), archs[model])] = c
        built: dict[tuple, Built] = {}
        to_build = []
        for (key, arch), c in wanted.items():
            reason = launch_reason(self.space, c, Limits.for_arch(arch)) if arch else None
            if reason:
                built[(key, arch)] = Built(pruned=reason)
            else:
                to_build.append((c, arch))
        # The first build alone: it pays the one-time set-ups (cuda.core's import, NVRTC's version, the
        # toolchain's fingerprint) that concurrent first builds would race on; the rest in parallel.
        for batch in (to_build[:1], to_build[1:]):
            for (c, arch), b in pool.builds(partial(build_config, str(self.path)), batch):
                built[(config_key(c), arch)] = b
        left: dict[str, list] = {}
        for model, points in todo.items():
            slot = models[model]
            for c, size in points:
                why, status = self._verdict(built.get((config_key(c), slot.arch)), c, slot.arch)
                if why:
                    self.record(Record(self.kernel, c, size, model, status, gpu=slot.name, host=slot.host, reason=why))
                else:
                    left.setdefault(model, []).append((c, size))
        return left

    def _verdict(self, b: Built | None, c: dict | None, arch: str | None) -> tuple[str, str]:
        """``(reason, status)`` for a point that will not be timed, or ``("", "")``."""
        if c is None or b is None:
            return "", ""
        if b.pruned:
            return b.pruned, tunestore.PRUNED
        if b.error:
            return b.error, tunestore.FAILED
        why = prune(self.space, c, b.resources, arch) if arch else None
        return (why, tunestore.PRUNED) if why else ("", "")

    def job(self, c: dict | None, size, slot: Slot) -> Job:
        """The worker's job for one point (the baselines at the sizes ``size`` when ``c`` is None)."""
        options = {"defines": c, **({"arch": slot.arch} if self.cuda else {})} if c is not None else {}
        return Job("baseline" if c is None else "tune", str(self.path),
                   ref=str(self.ref_path) if self.explicit_ref else None, options=options,
                   **({"sizes": size} if c is None else {"size": size}),
                   cache_dir=str(config.cache_dir()),
                   params={"space": {"defines": self.space.defines, "variant": self.space.variant},
                           "rep_s": self.rep_s, "cpu": not self.cuda})

    def outcome(self, slot: Slot, job: Job, out: Outcome) -> None:
        """Record a point's outcome from its worker (a baseline job's: one record per size)."""
        d = out.data
        first = (out.message or "").strip().splitlines()[:1]
        reason = "" if out.passed else f"{out.category}: {first[0] if first else ''}"
        if job.action == "baseline":
            per_size = dict((json.dumps(s), f) for s, f in d.get("sizes", [])) if out.passed else {}
            for size in job.sizes:
                f = per_size.get(json.dumps(size))
                status = tunestore.BASELINE if f else _STATUS.get(out.category, tunestore.FAILED)
                self.record(self._record(None, size, slot, status, f or {}, reason or "failed: no timing",
                                         (f or {}).get("seconds", out.seconds / len(job.sizes))))
            return
        status = tunestore.OK if out.passed else _STATUS.get(out.category, tunestore.FAILED)
        median = d.get("median_ms")
        if status == tunestore.OK and not (isinstance(median, (int, float)) and math.isfinite(median) and median > 0):
            status, reason = tunestore.FAILED, f"timing: a median of {median!r} ms, no time to rank it by"
        self.record(self._record(job.options["defines"], job.size, slot, status, d, reason, out.seconds))

    def _record(self, config: dict | None, size, slot: Slot, status: str, d: dict, reason: str,
                seconds: float) -> Record:
        return Record(self.kernel, config, size, slot.device, status, gpu=slot.name, host=slot.host,
                      median_ms=d.get("median_ms"), q25_ms=d.get("q25_ms"), q75_ms=d.get("q75_ms"),
                      compile_ms=d.get("compile_ms"), throughput=d.get("throughput"), unit=d.get("unit"),
                      pct_roof=d.get("pct_roof"), reason="" if status in (tunestore.OK, tunestore.BASELINE) else reason,
                      seconds=seconds)


def tune(path, *, defines: dict | None = None, constraints: list | None = None, sizes: list | None = None,
         threads=None, shared=None, variant: str | None = None, budget: int | None = None,
         time_limit: float | None = None, seed: int = 0, gpus=None, cluster: str | None = None,
         timeout: float = config.CHECK_TIMEOUT, store: str | Path | None = None, rep_s: float = 0.2,
         ref: str | Path | None = None, export: bool = True,
         on_record: Callable[[Record], None] | None = None) -> TuneReport:
    """Find the best ``#define`` values of a snippet per size and GPU (``jitlab tune PATH``).

    Args:
        path: The snippet; its ``NAME.ref.py`` declares the space as ``TUNE`` (see :mod:`jitlab.judge.space`).
        defines: ``{"BLOCK": [128, 256], ...}``: the axes, replacing the declared ones.
        constraints: Expressions over the defines (``"BLOCK * ITEMS <= 4096"``) or callables of a config.
        sizes: Problem sizes (default: the declared ones, else the ref's timed sizes).
        threads: Threads per block of a configuration (expression), for pruning.
        shared: Dynamic shared memory per block in bytes (expression), for pruning.
        variant: The ref's version to tune (default ``"original"``).
        budget: The most configurations tried: all of them up to it; above, a few at random, then
            those a model of the timings so far predicts fastest (:class:`~jitlab.judge.search.Search`).
        time_limit: Seconds after which no new point starts; the best so far is kept.
        seed: The search's seed.
        gpus: Devices: a count or numbers (``"0,1"``); default every GPU here (one CPU worker for C++).
        cluster: ``"local"`` (a local Dask cluster, one worker per GPU) or a Dask scheduler's ``tcp://`` address.
        timeout: Seconds one point may take before its worker is stopped (recorded as a timeout).
        store: The results file (default ``<cache>/results/NAME.tune.jsonl``).
        rep_s: Timing budget per point, seconds.
        ref: The reference file, if not ``NAME.ref.py`` beside the snippet.
        export: Write ``NAME.tuned.json`` beside the snippet and a chart beside the store.
        on_record: Called with each new :class:`~jitlab.judge.tunestore.Record` (progress).

    Returns:
        The :class:`~jitlab.judge.tunereport.TuneReport`; ``print`` it for the table.

    Raises:
        SnippetError: No space declared or given, or a constraint that is not an expression.
        ToolchainError: A CUDA snippet and no GPU to time it on.
    """
    t0 = time.monotonic()
    path = locate(path)
    ref_path = refs.path_for(path, ref)
    space = Space.from_ref(refs.load(ref_path), defines=defines, constraints=constraints, sizes=sizes,
                           threads=threads, shared=shared, variant=variant)
    name = path.name.split(".")[0]
    sweep = Sweep(path, ref_path, space, Store(store or results.results_dir() / f"{name}.tune.jsonl"),
                  explicit_ref=ref is not None, rep_s=rep_s, on_record=on_record)
    search = Search(space, budget, seed)
    deadline = t0 + time_limit if time_limit else None
    pool = make_pool(sweep.cuda, gpus, cluster)
    started = done = skipped = 0
    phases = dict.fromkeys(("plan", "points", "stop"), 0.0)
    mark = time.monotonic()

    def lap(phase: str) -> None:
        nonlocal mark
        now = time.monotonic()
        phases[phase] += now - mark
        mark = now

    if not sweep.store.known(sweep.kernel):
        pool.warm()  # a first sweep of this kernel has work to do: its workers start while it plans
    try:
        slots = pool.probe(sweep.cuda)
        models = {s.device: s for s in reversed(slots)}  # a model's first slot gives its arch
        # Rounds: all at once when exhaustive; else two configurations per GPU at a time (each timed at
        # every size), each round choosing from the timings of the rounds before it.
        batch = max(4, 2 * len(slots))
        while not (deadline and time.monotonic() >= deadline):
            configs = search.next(sweep.times(models), batch)
            if not configs:
                break
            todo, known = sweep.todo(configs, models)
            skipped += known
            if todo:
                pool.warm()  # the workers start while the builds are looked up (a rerun with nothing to do starts none)
            left = sweep.prune_and_build(pool, todo, models) if todo else {}
            queues = {m: [sweep.job(c, size, models[m]) for c, size in points] for m, points in left.items()}
            started += sum(map(len, queues.values()))
            lap("plan")
            for slot, job, out in pool.run(queues, timeout, deadline):
                sweep.outcome(slot, job, out)
                done += 1
            lap("points")
    finally:
        lap("plan")
        pool.close()
        lap("stop")
    stopped = "time limit" if done < started or (deadline and search.left > 0) else ""
    known = [r for r in sweep.store.known(sweep.kernel).values()
             if r.device in models and (r.config is None or r.config in space)]
    report = TuneReport(name, sweep.kernel, space, known, sweep.store.path, measured=sweep.measured, skipped=skipped,
                        seconds=time.monotonic() - t0, stopped=stopped, devices=list(dict.fromkeys(s.device for s in slots)),
                        phases={k: round(v, 2) for k, v in phases.items()} if started else {})
    table, chart = tuned_path(path), sweep.store.path.with_suffix(".png")
    if export and report.best() and (report.measured or not (table.is_file() and chart.is_file())):
        report.export(table)
        report.chart(chart)
    return report
