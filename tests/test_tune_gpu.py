"""The tuner on GPUs: a small sweep of the lesson's register-tiled SGEMM end to end on one GPU, and the
same sweep spread over two GPUs, each recording its own points (`make gpu-test` on a GPU machine)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from jitlab.judge import tunestore
from jitlab.worker.tune import tune

pytestmark = pytest.mark.gpu

SGEMM = Path(__file__).resolve().parent.parent / "kernels" / "tuning" / "sgemm_tiles.cu"
#: 8 tile shapes, one of them (128 x 128 tiles of 2 x 4: 2048 threads a block) pruned before compiling.
SMALL = {"BM": [32, 128], "BN": [32, 128], "BK": [8], "TM": [2, 4], "TN": [4]}


def gpus() -> int:
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def test_a_small_sweep_on_one_gpu_checks_times_prunes_and_exports(tmp_path, cache):
    """One GPU: every right configuration is timed, the 128 x 128 / 2 x 4 tile (2048 threads) is pruned at both sizes
    with its reason, the best is reported against torch eager and torch.compile with its % of roof,
    and a rerun runs nothing."""
    store = tmp_path / "sgemm.jsonl"
    report = tune(SGEMM, defines=SMALL, constraints=[], sizes=[256, 1024], gpus=1, store=store, rep_s=0.05,
                  export=False)
    by_status = report.counts()
    assert by_status.get(tunestore.PRUNED) == 2 and by_status.get(tunestore.OK) == 14, by_status
    pruned = [r for r in report.records if r.status == tunestore.PRUNED]
    assert all("2048 threads per block" in r.reason for r in pruned)
    for best in report.best():
        assert best.record.unit == "TFLOP/s" or best.record.unit == "GB/s"
        assert best.record.pct_roof is not None and best.vs_torch and best.vs_compile
    again = tune(SGEMM, defines=SMALL, constraints=[], sizes=[256, 1024], gpus=1, store=store, export=False)
    assert again.measured == 0


@pytest.mark.skipif(gpus() < 2, reason="needs 2 GPUs (the 2-GPU kind): this machine has fewer")
def test_a_sweep_on_two_gpus_uses_both(tmp_path, cache):
    """Two GPUs (local worker processes): both run points, and each record names the GPU that ran it."""
    report = tune(SGEMM, defines=SMALL, constraints=[], sizes=[1024], gpus=2, store=tmp_path / "s.jsonl", rep_s=0.05,
                  export=False)
    ran = [r for r in report.records if r.status in (tunestore.OK, tunestore.BASELINE)]
    assert {r.gpu for r in ran} == {"0", "1"}


@pytest.mark.skipif(gpus() < 2, reason="needs 2 GPUs (the 2-GPU kind): this machine has fewer")
def test_a_sweep_on_a_local_dask_cluster_uses_both_gpus(tmp_path, cache):
    """The same on a local Dask cluster, one worker per GPU with a GPU=1 resource. (torch's baselines are
    one job: the worker that runs it may finish no point of this small space, so count both.)"""
    pytest.importorskip("distributed")
    report = tune(SGEMM, defines=SMALL, constraints=[], sizes=[1024], gpus=2, cluster="local",
                  store=tmp_path / "s.jsonl", rep_s=0.05, export=False)
    ran = [r for r in report.records if r.status in (tunestore.OK, tunestore.BASELINE)]
    assert {r.gpu for r in ran} == {"0", "1"}
