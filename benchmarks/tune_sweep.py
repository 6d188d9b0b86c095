"""`jitlab tune` against its targets, on a 2-GPU machine: the lesson's register-tiled SGEMM
(kernels/tuning/sgemm_tiles.cu, 300 tile shapes) at 3 sizes.

Targets (issue: sweeps on every GPU):
  1. 2 GPUs give >= 1.8x the points per second of 1 GPU, same run, same warm build cache;
  2. a rerun of a finished sweep takes <= 5 % of its first time;
  3. a budgeted search (budget below the space: a few at random, then a model's predicted fastest) finds a
     configuration within 3 % of the best the exhaustive sweep found, per size.

Steps (each is one command, so that each fits a 10-minute call; state is kept in --dir). Run `budget` before
`two` and `one`: the first sweep on a machine pays one-time costs (torch.compile's on-disk caches, the GPU's
measured peaks), which then fall on neither side of the 1-vs-2 ratio. GPU 0 runs both `one` and `two`: each
step records the GPUs' temperature, SM clock and power as it ends (`gpus_after`), and the report where each
sweep's seconds went (`phases`: plan, points, stop):

    python benchmarks/tune_sweep.py build      # compile all configurations once (the cache the sweeps share)
    python benchmarks/tune_sweep.py budget     # a search of --budget configs on 2 GPUs -> budget.jsonl
    python benchmarks/tune_sweep.py two        # the exhaustive sweep on GPUs 0 and 1  -> two.jsonl
    python benchmarks/tune_sweep.py one        # the same sweep on GPU 0                -> one.jsonl
    python benchmarks/tune_sweep.py rerun      # `two` again: every point known
    python benchmarks/tune_sweep.py report     # the three figures, from the saved timings

`all` runs them in order. Every step appends its wall time to --dir/steps.json; with $OUT set, the report is
also written there as tune_sweep.json, with the stores (one.jsonl, two.jsonl, budget.jsonl). The sweeps
time with the tuner's own timing (rep_s per point), so "points per second" includes each point's check
against torch.matmul.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
SNIPPET = ROOT / "kernels" / "tuning" / "sgemm_tiles.cu"
STEPS = ("build", "budget", "two", "one", "rerun", "report")


def space():
    from jitlab.judge import refs
    from jitlab.judge.space import Space

    return Space.from_ref(refs.load(SNIPPET.with_name("sgemm_tiles.ref.py")))


def saved(d: Path) -> dict:
    path = d / "steps.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def gpu_state() -> list[str] | None:
    """Each GPU's temperature, SM clock and power as the step ends (nvidia-smi), or None: a GPU that
    ran the step before may be hotter and clocked lower, which a 1-vs-2 GPU ratio must not hide."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=index,temperature.gpu,clocks.sm,power.draw",
                              "--format=csv,noheader"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip().splitlines() if out.returncode == 0 else None


def save(d: Path, step: str, **figures) -> None:
    data = saved(d)
    data[step] = {**figures, "gpus_after": gpu_state()}
    (d / "steps.json").write_text(json.dumps(data, indent=1))
    print(f"{step}: {figures}")


def step_build(d: Path, args) -> None:
    """Compile every configuration for this GPU, 16 at a time (the sweeps then only hit the cache)."""
    import torch

    import jitlab
    from jitlab.judge.space import Limits, launch_reason

    major, minor = torch.cuda.get_device_capability(0)
    arch = f"sm_{major}{minor}"
    s = space()
    configs = [c for c in s.configs() if not launch_reason(s, c, Limits.for_arch(arch))]
    t0 = time.perf_counter()
    with ThreadPoolExecutor(os.cpu_count()) as ex:
        built = list(ex.map(lambda c: jitlab.build(SNIPPET, defines=c, arch=arch).cached, configs))
    save(d, "build", configs=len(configs), seconds=time.perf_counter() - t0, cached=sum(built), arch=arch)


def sweep(d: Path, args, name: str, gpus: int, budget: int | None = None):
    from jitlab.worker.tune import tune

    t0 = time.perf_counter()
    report = tune(SNIPPET, gpus=gpus, store=d / f"{name}.jsonl", rep_s=args.rep_s, budget=budget, seed=args.seed,
                  export=False, timeout=120)
    seconds = time.perf_counter() - t0
    print(report)
    best = {str(b.size): {"config": b.record.config, "ms": b.record.median_ms, "pct_roof": b.record.pct_roof,
                          "vs_torch": b.vs_torch, "vs_compile": b.vs_compile} for b in report.best()}
    return report, seconds, {"best": best, "phases": report.phases}


def step_one(d: Path, args) -> None:
    report, seconds, more = sweep(d, args, "one", 1)
    save(d, "one", points=report.measured, seconds=seconds, per_s=report.measured / seconds, **more)


def step_two(d: Path, args) -> None:
    report, seconds, more = sweep(d, args, "two", 2)
    per_gpu = {}
    for r in report.records:
        per_gpu[r.gpu] = per_gpu.get(r.gpu, 0) + 1
    save(d, "two", points=report.measured, seconds=seconds, per_s=report.measured / seconds, per_gpu=per_gpu, **more)


def step_rerun(d: Path, args) -> None:
    report, seconds, _ = sweep(d, args, "two", 2)
    save(d, "rerun", points=report.measured, skipped=report.skipped, seconds=seconds)


def step_budget(d: Path, args) -> None:
    report, seconds, more = sweep(d, args, "budget", 2, budget=args.budget)
    save(d, "budget", budget=args.budget, points=report.measured, seconds=seconds, **more)


def step_report(d: Path, args) -> None:
    s = saved(d)
    out = {"snippet": str(SNIPPET.relative_to(ROOT)), "configs": len(space().configs()), "sizes": space().sizes,
           "steps": s}
    if "one" in s and "two" in s:
        out["two_vs_one"] = s["two"]["per_s"] / s["one"]["per_s"]
    if "two" in s and "rerun" in s:
        out["rerun_share"] = s["rerun"]["seconds"] / s["two"]["seconds"]
    if "two" in s and "budget" in s:  # the budget's best against the exhaustive best, per size
        out["budget_vs_exhaustive"] = {size: s["budget"]["best"][size]["ms"] / b["ms"]
                                       for size, b in s["two"]["best"].items() if size in s["budget"]["best"]}
    print(json.dumps({k: v for k, v in out.items() if k != "steps"}, indent=1))
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "tune_sweep.json").write_text(json.dumps(out, indent=1))
        for name in ("one", "two", "budget"):
            if (d / f"{name}.jsonl").is_file():
                shutil.copyfile(d / f"{name}.jsonl", Path(os.environ["OUT"], f"{name}.jsonl"))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("step", choices=[*STEPS, "all"])
    p.add_argument("--dir", default=str(ROOT / "build_cache" / "tune_sweep"), help="where the stores and figures go")
    p.add_argument("--rep-s", type=float, default=0.1, help="timing budget per point (default 0.1 s)")
    p.add_argument("--budget", type=int, default=60, help="configurations the random search tries (default 60)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    d = Path(args.dir)
    d.mkdir(parents=True, exist_ok=True)
    for step in STEPS if args.step == "all" else [args.step]:
        globals()[f"step_{step}"](d, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
