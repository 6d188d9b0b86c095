"""KernelBench corpus benchmark: other people's solutions, with torch's ``load_inline`` and with jitlab's, in one run.

Takes a folder of KernelBench pairs (``scripts/kernelbench-corpus MIRROR`` lays the public leaderboard out in
``corpora/kernelbench/``: one folder per pair with ``problem.py`` and ``solution.py``) and measures:

* **per pair, each side in a fresh process**: the solution imported with torch's ``load_inline`` (its own
  ``TORCH_EXTENSIONS_DIR``, cold, as KernelBench gives each sample its build folder), then with jitlab's
  (``torch.utils.cpp_extension.load_inline`` patched before the file runs, so every import style gets it;
  one fresh jitlab cache for the whole side). Each says: built, right (KernelBench's check: 5 trials of
  ``get_inputs()`` under seeds drawn from 42, ``atol = rtol = 1e-2``), build seconds, the first line of
  any error. The jitlab side runs its first pair alone (it makes the precompiled torch headers), the
  next ``--cold`` one at a time (their median is "a new solution's cold build, headers made", on an idle
  machine), then the rest ``-j`` at a time (their builds contend for the cores).
* **the sample's wall time, KernelBench's way**: torch's side above over the sample (a fresh process per
  solution, ``-j`` builds in parallel, each graded and timed against ``Model`` eager) against
  ``jitlab check`` of the same pairs (parallel compile-only builds, then grading in a warm worker;
  ``--no-compile`` so both time the same things), from a fresh jitlab cache, headers included.

    PYTHONPATH=. python benchmarks/kernelbench_corpus.py corpora/kernelbench --limit 120 --jitlab-only -j 16
    PYTHONPATH=. python benchmarks/kernelbench_corpus.py corpora/kernelbench --limit 20 --torch-sample 20 -j 16
    # no GPU: builds only (jitlab: compile-only for sm_90; torch: its build and import), no grading
    PYTHONPATH=. python benchmarks/kernelbench_corpus.py tests/fixtures/kernelbench --compile-only -j 2
    # a CPU problem with C++-only solutions, graded on the CPU
    PYTHONPATH=. python benchmarks/kernelbench_corpus.py tests/fixtures/kernelbench/cpu_scaled_relu --device cpu
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from jitlab.judge import kernelbench, kernelbench_grade, kernelbench_pairs  # noqa: E402
from jitlab.judge.gradebook import first_line  # noqa: E402


def spread(items: list, n: int | None) -> list:
    """``n`` of ``items`` evenly spaced (all of them when ``n`` is None or not smaller)."""
    if n is None or n >= len(items):
        return list(items)
    return [items[int(i * len(items) / n)] for i in range(n)] if n > 0 else []


def why(e: BaseException) -> str:
    """An exception's first line that says most: a compile error's located line, or a compiler's ``error`` line."""
    text = str(e)
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    errors = [ln for ln in lines if "error" in ln.lower() and "error building extension" not in ln.lower()]
    return f"{type(e).__name__}: {first_line(text) if ', line ' in text else (errors or lines or [''])[0][:240]}"


# --- one pair, one side, in this (fresh) process ----------------------------------------------------

def child(loader: str, problem: str, solution: str, device: str, compile_only: bool, arch: str) -> dict:
    """Import the solution with ``loader``'s ``load_inline`` and grade it (or, compile-only, just build it)."""
    out = {"built": False, "right": None, "build_s": None, "error": ""}
    pair = kernelbench_pairs.Pair(Path(problem), Path(solution), Path(solution).parent.name)
    t0 = time.perf_counter()
    try:
        if compile_only and loader == "jitlab":
            c = kernelbench.compile_pair(pair, arch=[arch], compile_only=True)
            out.update(built=not c.error, build_s=round(c.seconds, 3), error=first_line(c.error))
            return out
        imported = kernelbench.import_solution(pair.solution, loader)
    except BaseException as e:  # noqa: BLE001 -- a failed build is this pair's result
        out.update(build_s=round(time.perf_counter() - t0, 3), error=why(e))
        return out
    out.update(built=True, build_s=round(imported[1].seconds, 3))
    if compile_only:
        return out
    try:
        g = kernelbench_grade.grade(problem, solution, loader=loader, device=device, compile_ref=False, imported=imported)
        out.update(right=g.verdict.passed, ms=g.data.get("ms"), eager_ms=g.data.get("eager_ms"),
                   error="" if g.verdict.passed else first_line("\n".join([kernelbench_grade.mismatch_message(g.verdict),
                                                                          *str(g.verdict).splitlines()[1:2]])))
    except BaseException as e:  # noqa: BLE001
        out.update(right=False, error=why(e))
    return out


def run_child(loader: str, pair: kernelbench_pairs.Pair, args, env: dict) -> dict:
    """One pair on one side in a fresh process; its result (with the process's wall seconds)."""
    with tempfile.TemporaryDirectory(prefix="kb-child-") as tmp:
        result = Path(tmp) / "result.json"
        env = dict(env, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")])))
        if loader == "torch":
            env["TORCH_EXTENSIONS_DIR"] = str(Path(tmp) / "torch_extensions")  # a cold, private build folder
        cmd = [sys.executable, str(Path(__file__).resolve()), "--child", loader, str(pair.problem.resolve()),
               str(pair.solution.resolve()), "--out", str(result),
               "--device", args.device, "--arch", args.arch] + (["--compile-only"] if args.compile_only else [])
        t0 = time.perf_counter()
        try:
            p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.timeout, cwd=tmp)
            res = json.loads(result.read_text()) if result.is_file() else {
                "built": False, "right": None, "build_s": None,
                "error": f"the process exited with {p.returncode}: " + ((p.stderr or p.stdout).strip().splitlines()
                                                                        or [""])[-1][:240]}
        except subprocess.TimeoutExpired:
            res = {"built": None, "right": None, "build_s": None, "error": f"timeout after {args.timeout:g} s"}
    res["wall_s"] = round(time.perf_counter() - t0, 2)
    return res


def side(loader: str, pairs: list, args, env: dict, alone: int = 0) -> tuple[dict, float]:
    """Every pair on one side, ``-j`` processes at a time, the first ``alone`` one at a time before them
    (the first makes the headers; the next are new solutions' cold builds on an idle machine); results
    and wall time."""
    t0 = time.perf_counter()
    results = {}
    batches = [*([p] for p in pairs[:alone]), pairs[alone:]]
    for batch in batches:
        with ThreadPoolExecutor(args.jobs) as ex:
            for pair, res in zip(batch, ex.map(lambda p: run_child(loader, p, args, env), batch)):
                results[pair.name] = res
                if not args.json:
                    print(f"  {loader:<6} {pair.name:<44} {row(res)}", flush=True)
    return results, time.perf_counter() - t0


def row(res: dict | None) -> str:
    if res is None:
        return "-"
    state = "timeout" if res["built"] is None else "not built" if not res["built"] else \
        "built" if res["right"] is None else "right" if res["right"] else "wrong"
    took = f" {res['build_s']:.1f} s" if res.get("build_s") is not None else ""
    return f"{state}{took}"


def jitlab_check(pairs: list, args, env: dict, folder: Path, headers: Path | None = None) -> tuple[dict, float]:
    """``jitlab check`` over the pairs from a fresh cache in ``folder``: its JSON report and the command's wall
    time. ``headers``: a folder of precompiled headers made before (else they are made in ``folder/pch``)."""
    files = [str(f.resolve()) for p in pairs for f in (p.problem, p.solution)]  # each solution after its problem
    cmd = [sys.executable, "-m", "jitlab", "check", *files, "--json",
           "--no-compile", "--store", str(folder / "grades.jsonl"), "-j", str(args.jobs)]
    cmd += ["--device", "cpu"] if args.device == "cpu" else []
    cmd += ["--compile-only", "--arch", args.arch] if args.compile_only else []
    t0 = time.perf_counter()
    path = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))  # jitlab's, then the caller's
    p = subprocess.run(cmd, env=dict(env, JITLAB_CACHE_DIR=str(folder / "cache"), PYTHONPATH=path,
                                     JITLAB_PCH_DIR=str(headers or folder / "pch")),
                       capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - t0
    try:  # the JSON after any progress lines (the precompiled headers' note)
        return json.loads(p.stdout[p.stdout.index("{\n"):] if "{\n" in p.stdout else p.stdout), wall
    except ValueError:
        raise SystemExit(f"jitlab check failed ({p.returncode}):\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}") from None


def summary(report: dict) -> dict:
    """What a check's report says of its time: the counts, and each solution's build and grading seconds."""
    return {"counts": report["counts"], "seconds": report["seconds"],
            "grades": {g["pair"]: {"category": g["category"], "build_s": g["build_s"], "grade_s": g["seconds"],
                                   "time": g["time"], "error": "" if g["category"] == "pass" else g["message"][:2000]}
                       for g in report.get("grades", [])}}


def checks(sample: list, args, env: dict, out: dict) -> None:
    """``jitlab check`` of the sample twice: from nothing (the precompiled headers made in the run), then from a
    fresh build cache with those headers (a machine that has built before: every solution still cold)."""
    with tempfile.TemporaryDirectory(prefix="kb-check-") as tmp:
        first, second = Path(tmp) / "fresh", Path(tmp) / "headers-made"
        report, out["jitlab_check_wall_s"] = jitlab_check(sample, args, env, first)
        out["jitlab_check"] = summary(report)
        out["ratio"] = out["torch_wall_s"] / out["jitlab_check_wall_s"]
        if args.headers_made:
            report, out["jitlab_check_headers_made_wall_s"] = jitlab_check(sample, args, env, second, first / "pch")
            out["jitlab_check_headers_made"] = summary(report)
            out["ratio_headers_made"] = out["torch_wall_s"] / out["jitlab_check_headers_made_wall_s"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("pairs", nargs="?", help="a folder of pair folders (problem.py + solution.py each)")
    ap.add_argument("--limit", type=int, help="this many pairs, evenly spread over the sorted folder (default: all)")
    ap.add_argument("--torch-sample", type=int, default=20,
                    help="pairs (evenly spread) run on torch's side and timed both ways (default 20; 0: none)")
    ap.add_argument("--jitlab-only", action="store_true", help="only jitlab's side: no torch runs, no wall-time ratio")
    ap.add_argument("--cold", type=int, default=5,
                    help="after the first (which makes the headers), this many pairs built one at a time on an idle "
                         "machine: the median is a new solution's cold build (default 5)")
    ap.add_argument("-j", "--jobs", type=int, default=os.cpu_count(), help="processes (builds) at a time")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"], help="where the solutions are graded")
    ap.add_argument("--compile-only", action="store_true", help="build only, no GPU: no grading, no timing")
    ap.add_argument("--arch", default="sm_90", help="the arch of --compile-only CUDA builds (default sm_90)")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds one pair's process may take (default 600)")
    ap.add_argument("--headers-made", action="store_true",
                    help="time jitlab check of the sample a second time, from a fresh build cache with the precompiled "
                         "headers the first made (a machine that has built before)")
    ap.add_argument("--no-pairs", action="store_true",
                    help="with a torch sample: only the wall times (torch's side, jitlab check), not jitlab's side pair by pair")
    ap.add_argument("--json", action="store_true", help="print the results as JSON instead of the table")
    ap.add_argument("--child", choices=kernelbench.LOADERS, help=argparse.SUPPRESS)
    ap.add_argument("child_files", nargs="*", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        problem, solution = [args.pairs, *args.child_files][:2]
        res = child(args.child, problem, solution, args.device, args.compile_only, args.arch)
        Path(args.out).write_text(json.dumps(res))
        return 0
    if not args.pairs:
        ap.error("name a folder of pairs (scripts/kernelbench-corpus lays the leaderboard out in corpora/kernelbench)")
    pairs = spread(kernelbench_pairs.pairs([args.pairs]), args.limit)
    sample = [] if args.jitlab_only else spread(pairs, args.torch_sample)
    env = {k: v for k, v in os.environ.items() if k not in ("JITLAB_CACHE_DIR", "JITLAB_PCH_DIR")}  # cold: headers too
    out = {"pairs": len(pairs), "sample": [p.name for p in sample], "jobs": args.jobs, "device": args.device,
           "compile_only": args.compile_only, "cold": args.cold}
    torch_res: dict = {}
    if sample:
        torch_res, out["torch_wall_s"] = side("torch", sample, args, env)
        key = "built" if args.compile_only else "right"
        out["torch_" + key] = sorted(n for n, r in torch_res.items() if r.get(key))
        checks(sample, args, env, out)
    if args.no_pairs and sample:
        print(json.dumps(out, indent=1) if args.json else walls(out))
        return 0
    with tempfile.TemporaryDirectory(prefix="kb-jitlab-") as cache:
        jit_res, out["jitlab_wall_s"] = side("jitlab", pairs, args, dict(env, JITLAB_CACHE_DIR=cache),
                                             alone=1 + args.cold)
    after_first = [jit_res[p.name]["build_s"] for p in pairs[1:] if jit_res[p.name].get("built")]
    out["median_build_after_first_s"] = statistics.median(after_first) if after_first else None
    alone = [jit_res[p.name]["build_s"] for p in pairs[1:1 + args.cold] if jit_res[p.name].get("built")]
    out["median_cold_build_alone_s"] = statistics.median(alone) if alone else None
    out["first_build_s"] = jit_res[pairs[0].name].get("build_s") if pairs else None
    out["results"] = {p.name: {"jitlab": jit_res[p.name], "torch": torch_res.get(p.name)} for p in pairs}
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        print(table(pairs, out, torch_res, jit_res))
    return 0


def table(pairs: list, out: dict, torch_res: dict, jit_res: dict) -> str:
    """A row per pair (torch's side, jitlab's, the first error), then the figures."""
    width = min(44, max(len(p.name) for p in pairs))
    lines = [f"{'pair':<{width}}  {'torch':<16} {'jitlab':<16} first error"]
    for p in pairs:
        t, j = torch_res.get(p.name), jit_res[p.name]
        lines.append(f"{p.name:<{width}}  {row(t):<16} {row(j):<16} {j['error'][:110]}")
        if t and t.get("error"):  # torch's own, to compare: the same line and cause?
            lines.append(f"{'':<{width}}  {'':<33} torch: {t['error'][:110]}")
    key = "built" if out["compile_only"] else "right"
    ok_j = sum(bool(r.get(key)) for r in jit_res.values())
    lines.append(f"\njitlab: {ok_j} of {len(pairs)} {key}, {out['jitlab_wall_s']:.0f} s for the side "
                 f"({out['jobs']} processes at a time); first build (headers made) {out['first_build_s'] or 0:.1f} s, "
                 f"median build after it {out['median_build_after_first_s'] or 0:.1f} s; a new solution's "
                 f"cold build alone (the next {len(pairs[1:1 + out['cold']])}, one at a time), median "
                 + (f"{out['median_cold_build_alone_s']:.1f} s" if out["median_cold_build_alone_s"] else "- (none built)"))
    if torch_res:
        ok_t = [n for n, r in torch_res.items() if r.get(key)]
        both = [n for n in ok_t if jit_res[n].get(key)]
        lines.append(f"torch's sample: {len(ok_t)} of {len(torch_res)} {key}; {len(both)} of those {key} under jitlab"
                     + (f" (not: {', '.join(n for n in ok_t if n not in both)})" if len(both) < len(ok_t) else ""))
        lines.append(walls(out))
    return "\n".join(lines)


def walls(out: dict) -> str:
    """The sample's wall times, torch's way against jitlab check's (and with headers made, if timed)."""
    text = (f"wall time, the sample ({len(out['sample'])} pairs) KernelBench's way: torch {out['torch_wall_s']:.1f} s, "
            f"jitlab check {out['jitlab_check_wall_s']:.1f} s (cold cache, headers included): {out['ratio']:.2f}x "
            f"(torch: {len(out.get('torch_right', out.get('torch_built', [])))} of {len(out['sample'])} "
            f"{'built' if out['compile_only'] else 'right'}; jitlab check: {out['jitlab_check']['counts']})")
    if "ratio_headers_made" in out:
        text += (f"\n  jitlab check, fresh build cache with the headers made: "
                 f"{out['jitlab_check_headers_made_wall_s']:.1f} s: {out['ratio_headers_made']:.2f}x")
    return text


if __name__ == "__main__":
    sys.exit(main())
