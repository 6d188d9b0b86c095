"""The tuner's and batch checker's jobs on Dask distributed: one machine or many, the same API.

Every Dask worker that times kernels owns one GPU and says so with a resource, ``GPU=1``; a job asks
for ``{"GPU": 1}``, so a worker runs one at a time and two jobs never share a GPU. Inside the task
the job goes to a warm jitlab worker process (:class:`jitlab.worker.isolate.Worker`) for that GPU,
exactly as :class:`jitlab.worker.pool.LocalPool` does it: a configuration that crashes or hangs
stops that process, and the Dask worker reports the point as crashed or timed out and takes the next.
Builds are tasks without a resource (any worker's CPU).

- ``DaskPool.local(2)``: a ``LocalCluster`` in this process (threads, no process start-up), one Dask
  worker per GPU, the worker named after its GPU, which its jitlab worker gets as ``CUDA_VISIBLE_DEVICES``.
- ``DaskPool.connect("tcp://host:8786")``: a cluster started by hand, one Dask worker per GPU::

      dask scheduler
      CUDA_VISIBLE_DEVICES=0 dask worker tcp://host:8786 --nthreads 1 --resources GPU=1 --name gpu0
      CUDA_VISIBLE_DEVICES=1 dask worker tcp://host:8786 --nthreads 1 --resources GPU=1 --name gpu1

  Each worker's jitlab process inherits its ``CUDA_VISIBLE_DEVICES``; every machine needs jitlab
  installed, and builds made on one machine are rebuilt (once) by the others' caches.
No dask-cuda: a resource and an environment variable per worker are all it would add here.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Callable, Iterable, Iterator

from jitlab.worker import isolate, jobs
from jitlab.worker.jobs import Job, Outcome
from jitlab.worker.pool import Slot, identify, run_guarded


def run_on_worker(job: Job, timeout: float, devices: dict | None, timing: bool) -> tuple[str, Outcome]:
    """A Dask task: run ``job`` in this Dask worker's jitlab worker process; ``(worker name, outcome)``.

    Args:
        devices: Worker name → ``CUDA_VISIBLE_DEVICES`` for a cluster jitlab started; None: the
            jitlab process inherits the Dask worker's own GPU.
        timing: Asynchronous launches for timing; checks launch blocking (see :func:`jitlab.worker.pool.local_slots`).
    """
    from distributed import get_worker  # lazy: runs where Dask is

    name = str(get_worker().name)
    env = {"CUDA_LAUNCH_BLOCKING": "0" if timing else "1"}
    if devices:
        env["CUDA_VISIBLE_DEVICES"] = devices[name]
    return name, run_guarded(isolate.worker(**env), job, timeout)


def identify_worker(cuda: bool, devices: dict | None) -> dict:
    """A Dask task: this Dask worker's device (:func:`jitlab.worker.pool.identify`), asked in its own process.

    A worker of a cluster jitlab started owns this process's visible device numbered by its name; one
    started by hand sees only its own GPU (``CUDA_VISIBLE_DEVICES``), device 0.
    """
    from distributed import get_worker  # lazy: runs where Dask is

    name = str(get_worker().name)
    slot = identify(Slot(name), cuda, int(name) if devices and name.isdigit() else 0)
    return {"device": slot.device, "arch": slot.arch, "host": slot.host}


def stop_workers() -> None:
    """Stop the jitlab worker processes of this Dask worker (run on every worker when a pool closes)."""
    isolate.stop_all()


class DaskPool:
    """The jobs of a sweep or a batch check as Dask tasks (see the module's docstring).

    Args:
        client: A ``distributed.Client``.
        devices: Worker name → GPU for a cluster jitlab started (None for one started by hand).
        cluster: The ``LocalCluster`` to close with the pool, if jitlab started it.
    """

    def __init__(self, client, devices: dict | None = None, cluster=None, timing: bool = True):
        self.client, self.devices, self._cluster, self.timing = client, devices, cluster, timing
        self.slots: list[Slot] = []

    @classmethod
    def local(cls, gpus, timing: bool = True) -> DaskPool:
        """A local Dask cluster in this process with one worker per GPU (a count or numbers), each ``GPU=1``;
        ``timing``: the jobs time kernels (see :func:`run_on_worker`)."""
        import logging

        from distributed import Client, Scheduler, SpecCluster, Worker

        from jitlab.worker.pool import local_slots

        slots = local_slots(gpus)
        # Workers in this process (threads: nothing to start); each named after its GPU, so a task knows
        # which GPU its worker owns.
        cluster = SpecCluster(scheduler={"cls": Scheduler, "options": {"dashboard_address": None}},
                              workers={n: {"cls": Worker, "options": {"nthreads": 1, "name": n,
                                                                      "resources": {"GPU": 1}}}
                                       for n in (s.name for s in slots)},
                              silence_logs=logging.ERROR, name="jitlab")
        client = Client(cluster)
        client.wait_for_workers(len(slots))
        return cls(client, {s.name: s.env["CUDA_VISIBLE_DEVICES"] for s in slots}, cluster, timing)

    @classmethod
    def connect(cls, address: str, timing: bool = True) -> DaskPool:
        """The Dask scheduler at ``address`` (its workers started with ``--resources GPU=1``).

        Raises:
            RuntimeError: No worker has a ``GPU`` resource (the message shows how to start one).
        """
        from distributed import Client

        client = Client(address)
        if not any(w.get("resources", {}).get("GPU") for w in client.scheduler_info()["workers"].values()):
            client.close()
            raise RuntimeError(f"{address}: no Dask worker has a GPU resource; start one per GPU with "
                               f"`CUDA_VISIBLE_DEVICES=N dask worker {address} --nthreads 1 --resources GPU=1`")
        return cls(client, timing=timing)

    def _gpu_workers(self) -> dict[str, str]:
        """Address → name of every worker with a ``GPU`` resource."""
        info = self.client.scheduler_info()["workers"]
        return {a: str(w.get("name", a)) for a, w in info.items() if w.get("resources", {}).get("GPU")}

    def probe(self, cuda: bool) -> list[Slot]:
        """Ask every GPU worker which device it has (one task pinned to each)."""
        workers = self._gpu_workers()
        futures = {a: self.client.submit(identify_worker, cuda, self.devices, workers=[a], resources={"GPU": 1},
                                         pure=False) for a in workers}
        self.slots = []
        for a, name in workers.items():
            found = futures[a].result()
            self.slots.append(Slot(name, device=found["device"], arch=found["arch"], host=found["host"], address=a))
        return self.slots

    def builds(self, build: Callable, items: Iterable) -> Iterator[tuple[object, object]]:
        """``(item, build(item))`` as each build task finishes, on any worker."""
        from distributed import as_completed

        items = list(items)
        futures = {self.client.submit(build, item, pure=False): i for i, item in enumerate(items)}
        for f in as_completed(futures):
            yield items[futures[f]], f.result()

    def run(self, queues: dict[str | None, Iterable[Job]], timeout: float, deadline: float | None = None
            ) -> Iterator[tuple[Slot, Job, Outcome]]:
        """Each device model's jobs on its GPU workers, one at a time per GPU; see :meth:`LocalPool.run`.

        Jobs are submitted from a thread as their queues give them (a queue may block until its next job
        exists), and reported as they finish.
        """
        by_name = {s.name: s for s in self.slots}
        futures: dict = {}
        done: queue.SimpleQueue = queue.SimpleQueue()

        def submit_all() -> None:
            try:
                for model, waiting in queues.items():
                    where = [s for s in self.slots if model is None or s.device == model]
                    for job in waiting:
                        f = self.client.submit(run_on_worker, job, timeout, self.devices, self.timing,
                                               workers=[s.address for s in where], resources={"GPU": 1}, pure=False)
                        futures[f] = (job, where[0])
                        f.add_done_callback(done.put)
            except BaseException as e:  # a bug in the queue, not a job's failure: raised in the caller's thread
                done.put(e)
            finally:
                done.put(None)

        threading.Thread(target=submit_all, daemon=True, name="jitlab-dask-submit").start()
        submitted, reported = None, 0
        while submitted is None or reported < submitted:
            f = done.get()
            if f is None:
                submitted = len(futures)
                continue
            if isinstance(f, BaseException):
                raise f
            reported += 1
            if f.cancelled():
                continue
            job, fallback = futures[f]
            try:
                name, out = f.result()
            except Exception as e:  # noqa: BLE001 -- the Dask worker itself died (KilledWorker), not the job
                name, out = fallback.name, Outcome(jobs.CRASH, f"its Dask worker was lost ({type(e).__name__}: {e})")
            yield by_name.get(name, fallback), job, out
            if deadline is not None and time.monotonic() >= deadline:
                for other in list(futures):
                    if not other.done():
                        other.cancel()
                deadline = None  # cancelled once; the running ones still report

    def warm(self) -> None:
        """Nothing: a Dask worker starts its jitlab worker with its first job."""

    def close(self) -> None:
        """Stop the jitlab processes on every worker; close the client (and the cluster jitlab started)."""
        try:
            self.client.run(stop_workers)
        finally:
            self.client.close()
            if self._cluster is not None:
                self._cluster.close()

