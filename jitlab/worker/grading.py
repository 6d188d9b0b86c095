"""Grading KernelBench solutions as a batch: ``jitlab check problem.py solutions/`` or ``jitlab check pairs/``.

The batch, in order (the tuner's engine, :mod:`jitlab.worker.tune`, with a KernelBench job):

1. **Pairs and keys.** The pairs the paths name (:func:`jitlab.judge.kernelbench_pairs.pairs`); those the results
   file already holds with the same sources, parameters and device model are taken from it, not graded.
2. **Build, in parallel on the CPU.** Each solution's ``load_inline`` calls are built without loading
   (:func:`jitlab.judge.kernelbench.compile_pair`), all started together, ``build_threads`` compilers at a time
   (the first to need the precompiled torch headers makes them; device code compiles meanwhile); a
   compile error is that solution's grade, at its line.
3. **Grade while the rest build, timing one at a time per GPU.** Each solution is graded as soon as it is
   built and a worker is free, while the builds go on; each built solution is a job for a warm worker process (local: up to
   ``MAX_LANES`` per device, whose checks share it and whose timings take it in turn; or Dask's, one per
   GPU, as ``jitlab tune --cluster`` runs them): import it (its builds are cache hits), check it on the
   problem's inputs, time it against ``Model`` eager and compiled. A crash or a hang costs that worker,
   which is restarted for the next solution. Each grade is appended to the results file as it ends.
4. **Report**: a verdict line per solution and the counts (:class:`jitlab.judge.gradebook.Report`).
"""

from __future__ import annotations

import contextlib
import queue
import shutil
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from functools import partial
from pathlib import Path

from jitlab import config
from jitlab.errors import ToolchainError
from jitlab.jit import nvml, prepare, processes, toolchain
from jitlab.judge import kernelbench
from jitlab.judge.gradebook import BUILT, Grade, Gradebook, Report
from jitlab.judge import kernelbench_pairs
from jitlab.judge.kernelbench import Compiled
from jitlab.judge.kernelbench_pairs import Pair
from jitlab.worker import jobs
from jitlab.worker.jobs import Job, Outcome
from jitlab.worker.tune import make_pool

#: Seconds one solution's grading may take (torch.compile of a large Model takes tens of seconds).
TIMEOUT = 300.0
#: Worker processes per GPU: their checks share it, their timings take it in turn. A check is mostly CPU work
#: (KernelBench draws a problem's inputs on the CPU: 0.06 s for 16M floats), so one per 2 CPU cores, at most
#: 8; a 2-core machine has one (each worker imports torch and holds a CUDA context).
MAX_LANES = 8
CORES_PER_LANE = 2
#: GiB of GPU memory per lane: lanes check side by side, each holding a problem's tensors and a Model (a
#: level-3 network's activations take gigabytes), so a small GPU gets fewer (80 GB: 8; 40 GB: 4; a T4: 1).
GIB_PER_LANE = 9
COMPILE_ONLY_ARCH = "sm_90"
#: Problems' references made ahead of their solutions' grading at most at once (:class:`Ahead`).
MOST_AHEAD = 32


def grade_many(paths, *, problem=None, device: str = "cuda", gpus=None, cluster: str | None = None,
               build_threads: int | None = None, timeout: float = TIMEOUT, trials: int = kernelbench.TRIALS,
               seed: int = kernelbench.SEED, time_it: bool = True, compile_ref: bool = True,
               compile_only: bool = False, arch: str | None = None, store=None, on_grade=None) -> Report:
    """Build and grade KernelBench solutions (see the module's docstring).

    Args:
        paths: Pair folders, folders of them, or a problem file followed by solution files (or folders).
        problem: The problem every solution in ``paths`` answers.
        device: ``"cuda"``, or ``"cpu"`` for problems whose solutions build C++ only.
        gpus: Devices (a count or numbers such as ``"0,1"``); default every GPU here.
        cluster: ``"local"`` or a Dask scheduler's ``tcp://`` address.
        build_threads: Compilers at once, as torch's ``MAX_JOBS`` (default: this machine's cores); up to
            :data:`~jitlab.worker.pool.BUILDS_PER_THREAD` builds each are in flight, most of them waiting.
        timeout: Seconds one solution's grading may take before its worker is stopped.
        trials, seed: KernelBench's correctness trials and the seed they are drawn from.
        time_it: Time the right ones; ``compile_ref``: against ``torch.compile`` of ``Model`` too.
        compile_only: Build only (no GPU needed; CUDA for ``arch``, default sm_90): nothing is graded or stored.
        store: The results file (default ``<cache>/results/kernelbench.jsonl``).
        on_grade: Called with each new :class:`~jitlab.judge.gradebook.Grade` (progress).

    Raises:
        ToolchainError: CUDA grading asked for and no GPU here (the message names ``--compile-only``).
        ArgumentError: Paths that name no pairs.
    """
    t0 = time.monotonic()
    found = kernelbench_pairs.pairs(paths, problem)
    cuda = device != "cpu"
    if cuda and not compile_only and not cluster and not toolchain.gpu_available():
        raise ToolchainError("no CUDA GPU found: grading a KernelBench solution runs it; build them only with "
                             "--compile-only (jitlab check ... --compile-only), grade C++-only solutions of a CPU "
                             "problem with --device cpu, or pass --cluster tcp://... (workers with GPUs)")
    if not cluster:  # every build waits for these: start them before probing the GPU and starting workers
        prepare.ahead(cuda)
    lanes = lanes_for(config.cores(), smallest_gpu_gib()) if cuda and not compile_only else 1
    pool = make_pool(cuda and not compile_only, gpus, None if compile_only else cluster, lanes=lanes)
    if build_threads and hasattr(pool, "build_threads"):
        pool.build_threads = build_threads
    book = Gradebook(store)
    params = {"device": device, "trials": trials, "seed": seed, "time_it": time_it, "compile_ref": compile_ref}
    grades: dict[int, Grade] = {}
    with processes.limited(build_threads), contextlib.ExitStack() as stack:  # -j N: N compilers at once
        try:
            model = pool.probe(cuda and not compile_only)[0].device
            keys = [p.key(model=model, **params) for p in found]
            known = {} if compile_only else book.known()
            todo = [i for i, k in enumerate(keys) if k not in known]
            grades.update({i: known[k] for i, k in enumerate(keys) if k in known})
            if todo and cuda and not compile_only:
                pool.warm()  # the workers start (torch, a CUDA context) while the solutions build
            build = partial(_compile, arch=[arch or COMPILE_ONLY_ARCH] if compile_only else None, compile_only=compile_only)
            built: dict[int, Compiled] = {}
            index: dict[int, int] = {}  # a job comes back as the same object (its id is the worker's)
            kept = threading.Lock()
            ahead = None if compile_only or cluster else stack.enter_context(Ahead([found[i].problem for i in todo], params))

            def keep(i: int, g: Grade, stored: bool) -> None:  # from the slots' threads too: one at a time
                with kept:
                    _keep(grades, i, g, book if stored else None, on_grade)

            def waiting() -> Iterator[Job]:  # the slots' threads ask it for the next job, one at a time
                for item in _as_built(pool, build, [(i, found[i]) for i in todo], ahead):
                    if isinstance(item, Job):  # no solution is built yet: a free lane makes a reference
                        yield item
                        continue
                    i, c = item
                    built[i] = c
                    if c.error or compile_only:
                        keep(i, _grade(found[i], keys[i], model, c, Outcome(jobs.COMPILE if c.error else BUILT, c.error)),
                             bool(c.error) and not compile_only)
                        if ahead:
                            ahead.graded(found[i].problem)
                        continue
                    made = ahead.made.get(str(found[i].problem)) if ahead else None
                    job = Job(kernelbench.ACTION, str(found[i].solution), ref=str(found[i].problem),
                              params={**params, "reference": made} if made else params, cache_dir=str(config.cache_dir()))
                    index[id(job)] = i
                    yield job

            as_built = waiting()
            if compile_only or not todo:
                for _ in as_built:  # builds only: nothing to run
                    pass
            else:
                for slot, job, out in pool.run({None: as_built}, timeout):
                    if job.action == kernelbench.REFERENCE:
                        ahead.finished(job, out)
                        continue
                    i = index[id(job)]
                    keep(i, _grade(found[i], keys[i], slot.device, built[i], out), True)
                    if ahead:
                        ahead.graded(found[i].problem)
        finally:
            pool.close()
    return Report([grades[i] for i in range(len(found)) if i in grades], len(todo), time.monotonic() - t0,
                  None if compile_only else book.path, compile_only)


def lanes_for(cores: int, gib: float | None) -> int:
    """Worker processes per GPU: one per :data:`CORES_PER_LANE` cores, at most :data:`MAX_LANES`, and at most
    one per :data:`GIB_PER_LANE` of the smallest GPU's memory (``gib``; ``None``: unknown, not bounded)."""
    n = min(MAX_LANES, cores // CORES_PER_LANE)
    return max(1, n if gib is None else min(n, int(gib // GIB_PER_LANE)))


def smallest_gpu_gib() -> float | None:
    """The memory of this machine's smallest GPU in GiB, as NVML reports it (no CUDA context is made), or
    ``None`` where NVML cannot say (no driver, no GPU)."""
    sizes = nvml.each_gpu(nvml.memory_gib)
    return min(sizes) if sizes else None


def _as_built(pool, build, items: list, ahead: Ahead | None = None) -> Iterator:
    """The builds of ``items``, all started at once on the pool's build threads, each as it ends (``(i,
    Compiled)``): a GPU grades what is built while the rest still builds. While none is waiting, the next
    reference job of ``ahead``, if any: a lane that would wait for a build makes a problem's reference.

    All start together, not the first alone: the first to need the precompiled headers makes them while
    the others wait for them in the cache, and device code compiles meanwhile.
    """
    done: queue.SimpleQueue = queue.SimpleQueue()

    def build_all() -> None:
        try:
            for (i, _), c in pool.builds(build, items):
                done.put((i, c))
        except BaseException as e:  # a bug, not a solution's failure: raised in the caller's thread
            done.put(e)
        finally:
            done.put(None)

    threading.Thread(target=build_all, daemon=True, name="jitlab-kernelbench-builds").start()
    while True:
        try:
            item = done.get_nowait()
        except queue.Empty:
            job = ahead.next_job() if ahead else None
            if job is not None:
                yield job
                continue
            item = done.get()
        if item is None:
            return
        if isinstance(item, BaseException):
            raise item
        yield item


class Ahead:
    """The problems' references (:func:`jitlab.judge.kernelbench_grade.reference`), made by lanes that would
    otherwise wait for a build: a solution built after its problem's reference is made grades its own half
    only (its inputs are not drawn again, ``Model`` is neither run nor timed again). Saved in a folder of
    this batch (a context manager: the folder goes at its end), each deleted once its problem's solutions are
    graded, at most :data:`MOST_AHEAD` at once (each holds at most ``kernelbench_grade.KEPT_BYTES``).

    Args:
        problems: The problem of each solution to grade, in build order (repeats for shared problems).
        params: The grading parameters (the references are made with the same).
    """

    def __init__(self, problems: list[Path], params: dict):
        self.params, self.most = params, MOST_AHEAD
        self.left = Counter(str(p) for p in problems)  # solutions not graded yet, by problem
        self.todo = list(self.left)  # problems whose reference no job makes yet
        self.made: dict[str, str] = {}  # problem -> its saved reference
        self._folder = Path(tempfile.mkdtemp(prefix="jitlab-kernelbench-"))
        self._jobs: dict[int, str] = {}  # id(job) -> problem
        self._lock = threading.Lock()

    def next_job(self) -> Job | None:
        """A job making the next problem's reference, or None (none left, or enough made and not used yet)."""
        with self._lock:
            if not self.todo or len(self._jobs) + len(self.made) >= self.most:
                return None
            problem = self.todo.pop(0)
            job = Job(kernelbench.REFERENCE, str(self._folder / f"{len(self.left) - len(self.todo)}.pt"),
                      ref=problem, params=self.params)
            self._jobs[id(job)] = problem
            return job

    def finished(self, job: Job, out: Outcome) -> None:
        """A reference job's outcome: its file is used if it passed (else each solution makes its own half)."""
        with self._lock:
            problem = self._jobs.pop(id(job))
            if out.category == jobs.PASS and self.left[problem] > 0:
                self.made[problem] = job.path
            else:
                Path(job.path).unlink(missing_ok=True)

    def graded(self, problem: Path) -> None:
        """One more solution of ``problem`` graded: its reference is deleted after the last."""
        with self._lock:
            key = str(problem)
            self.left[key] -= 1
            if key in self.todo and self.left[key] <= 0:
                self.todo.remove(key)
            if self.left[key] <= 0 and key in self.made:
                Path(self.made.pop(key)).unlink(missing_ok=True)

    def __enter__(self) -> Ahead:
        return self

    def __exit__(self, *exc) -> None:
        shutil.rmtree(self._folder, ignore_errors=True)


def _compile(item: tuple[int, Pair], *, arch, compile_only: bool) -> Compiled:
    """A build task (picklable, for Dask too): the compile phase of one pair."""
    return kernelbench.compile_pair(item[1], arch=arch, compile_only=compile_only)


def _grade(pair: Pair, key: str, device: str, built: Compiled, out: Outcome) -> Grade:
    d = out.data or {}
    message = out.message
    if out.category == jobs.MISMATCH and out.verdicts:
        message = "\n".join([message, *str(out.verdicts[0]).splitlines()[1:]])  # the checker's reasons and got/expected
    elif out.category not in (jobs.PASS, jobs.COMPILE, BUILT) and out.output.strip():
        message = f"{message}\n--- output ---\n{out.output.strip()[-2000:]}"
    return Grade(key, pair.name, str(pair.problem), str(pair.solution), device, out.category, message.strip(),
                 out.where, round(built.seconds, 3), built.cached, round(out.seconds, 3) if out.seconds else None,
                 d.get("ms"), d.get("eager_ms"), d.get("compile_ms"))


def _keep(grades: dict, i: int, g: Grade, book: Gradebook | None, on_grade) -> None:
    grades[i] = g
    if book is not None:
        book.append(g)
    if on_grade:
        on_grade(g)
