"""The ``jitlab`` command: ``build``, ``exec``, ``inspect``, ``check``, ``sanitize``, ``profile``, ``export``, ``tune``, ``run`` (``demo``), ``clean``. A thin layer over the library's functions."""

from __future__ import annotations

import argparse
import os
import sys
import time

from jitlab import config
from jitlab.errors import CompileError, JitlabError
from jitlab.jit import api, resources
from jitlab.jit.flags import defines_from
from jitlab.worker import isolate, profiler, sanitizer


def _build(args) -> int:
    defines = defines_from(args.define)
    status = 0
    for path in args.paths:
        t0 = time.perf_counter()
        try:
            b = api.build(path, mode=args.mode, arch=args.arch, defines=defines, cuda_cflags=args.nvcc_flag,
                          cflags=args.cflag, compile_only=args.compile_only, engine=args.engine, device=args.device)
        except JitlabError as e:  # a CompileError too: its log saved where the message says
            print(_about(path, e), file=sys.stderr)
            status = 1
            continue
        what = "cache hit" if b.cached else f"built in {time.perf_counter() - t0:.2f} s"
        engine = f" ({b.engine})" if b.plan.cuda else ""
        print(f"{path}: {b.plan.kind}-style{engine}, {what} -> {b.folder}")
        for line in [*b.notes, *(f"{name}: not callable ({why})" for name, why in b.plan.skipped)]:
            print(f"  {line}")
        print_resources(b.resources)
    return status


def _about(path, e: Exception) -> str:
    """An error's message, led by the path it is about unless the message names it already; a compile
    error's full log is saved where the message says (a terminal has no ``err.log`` to read)."""
    text = str(e)
    if isinstance(e, CompileError) and e.log:
        saved = _saved_log(path, e.log)
        if saved:
            text = text.replace("(the full compiler output is in this error's .log)", f"(the full compiler output: {saved})")
    return text if str(path) in text else f"{path}: {text}"


def _saved_log(path, log: str):
    """``log`` written to ``<cache>/logs/<snippet>.log`` (the last failure of each snippet), or None if it cannot be."""
    from pathlib import Path

    from jitlab.jit import cachedir

    try:
        folder = cachedir.trusted_root(config.cache_dir()) / "logs"
        folder.mkdir(parents=True, exist_ok=True)
        out = folder / f"{Path(str(path)).name[:100]}.log"
        out.write_text(log)
        return out
    except (OSError, JitlabError):
        return None


def print_resources(usage: dict) -> None:
    """One line per kernel and arch: registers, shared, local and constant memory, spills."""
    for line in resources.usage_lines(usage):
        print(line)


def _inspect(args) -> int:
    from jitlab.tools import inspect

    archs = [a.strip() for a in (args.arch or "sm_90").split(",") if a.strip()]
    real = [a for a in archs if not a.lower().startswith("compute_")]
    try:
        if len(real) < len(archs) and not args.ptx:
            raise JitlabError(f"{', '.join(a for a in archs if a not in real)}: a virtual arch, for which nvcc makes "
                              f"PTX, not machine code: there are no registers or occupancy to show; use "
                              f"{', '.join('sm_' + a.split('_', 1)[1] for a in archs if a not in real)}, or add --ptx "
                              f"to see the PTX")
        usage = inspect.resources(args.path, arch=real) if real else {}
        if args.kernel and args.kernel not in usage:
            print(f"{args.path}: no kernel {args.kernel!r} (kernels: {', '.join(sorted(usage)) or 'none'})", file=sys.stderr)
            return 1
        for kernel, per_arch in sorted(usage.items()):
            if args.kernel and kernel != args.kernel:
                continue
            for arch, r in sorted(per_arch.items()):
                occ = inspect.occupancy(r, args.block, args.smem, arch)
                print(f"{kernel} [{arch}]: {resources.usage_text(r)}")
                print(f"  block {args.block}, {args.smem} B dynamic shared: {occ['blocks_per_sm']} blocks/SM, "
                      f"{occ['warps_per_sm']}/{occ['max_warps_per_sm']} warps, occupancy {occ['occupancy']:.0%} "
                      f"(limited by {occ['limiter']})")
        for arch in archs:
            if args.ptx:
                print(f"\n// PTX [{arch}]")
                print(inspect.ptx(args.path, kernel=args.kernel, arch=arch), end="")
            if (args.sass or args.raw) and arch in real:
                print(f"\n// SASS [{arch}]" + (" (cuobjdump -sass)" if args.raw else ""))
                print(inspect.sass(args.path, kernel=args.kernel, arch=arch, raw=args.raw), end="")
    except JitlabError as e:
        print(_about(args.path, e), file=sys.stderr)
        return 1
    return 0


def _snippet_options(args) -> dict:
    opts = {"variant": args.variant, **({"device": args.device} if getattr(args, "device", None) else {})}
    if args.debug:
        opts["debug"] = True
    if args.define:
        opts["defines"] = defines_from(args.define)
    return opts


def _check(args) -> int:
    from jitlab.judge import kernelbench

    if args.problem or kernelbench.recognizes(args.paths):
        return _check_kernelbench(args)
    if args.gpus or args.cluster or args.ref:
        return _check_batch(args)
    status = 0
    for path in args.paths:
        try:
            out = isolate.check(path, isolate=not args.in_process, timeout=args.timeout or config.CHECK_TIMEOUT,
                               sizes=args.size or None, **_snippet_options(args))
        except JitlabError as e:
            print(_about(path, e), file=sys.stderr)
            status = 1
            continue
        print(f"{path}: {out}")
        if out.output.strip() and (args.show_output or not out.passed):
            print("--- what the kernel printed ---\n" + out.output.rstrip())
        status |= not out.passed
    return status


def _check_batch(args) -> int:
    """``jitlab check PATHS --gpus/--cluster/--ref``: every snippet in one table, spread over the devices."""
    from jitlab.worker import batch

    opts = _snippet_options(args)
    result = batch.check_many(args.paths, ref=args.ref, gpus=args.gpus, cluster=args.cluster,
                              timeout=args.timeout or config.CHECK_TIMEOUT, sizes=args.size or None, **opts)
    print(result)
    return 0 if result.passed == len(result.results) else 1


def _check_kernelbench(args) -> int:
    """``jitlab check problem.py solutions... | pairs/``: KernelBench's grading, a verdict line per solution, the table."""
    import json

    from jitlab.judge import gradebook
    from jitlab.worker import grading

    device = "cpu" if args.device == "cpu" else "cuda"  # a KernelBench problem's device: no emulator
    report = grading.grade_many(args.paths, problem=args.problem, device=device, gpus=args.gpus, cluster=args.cluster,
                                build_threads=args.jobs, timeout=args.timeout or grading.TIMEOUT,
                                trials=args.trials, time_it=not args.no_time, compile_ref=not args.no_compile,
                                compile_only=args.compile_only, arch=args.arch, store=args.store,
                                on_grade=None if args.json else lambda g: print(g.line(), flush=True))
    print(json.dumps(report.to_json(), indent=1) if args.json else f"\n{report}")
    return 0 if all(g.passed or g.category == gradebook.BUILT for g in report.grades) else 1


def _tune(args) -> int:
    from jitlab.judge.space import axes_from
    from jitlab.worker.tune import tune

    report = tune(args.path, defines=axes_from(args.define) or None, constraints=args.constraint or None,
                  sizes=args.size or None, threads=args.threads, budget=args.budget, time_limit=args.time_limit,
                  seed=args.seed, gpus=args.gpus, cluster=args.cluster, timeout=args.timeout, store=args.store,
                  rep_s=args.rep_s, export=not args.no_export,
                  on_record=None if args.quiet else lambda rec: print(f"  {rec}", flush=True))
    print(report)
    return 0 if report.best() else 1


def _report(path, make, ok) -> int:
    """Print what ``make()`` returns (exit 0 if ``ok(it)``), or the error naming the fix (exit 1)."""
    try:
        result = make()
    except JitlabError as e:
        print(_about(path, e), file=sys.stderr)
        return 1
    print(result)
    return 0 if ok(result) else 1


def _sanitize(args) -> int:
    return _report(args.path, lambda: sanitizer.sanitize(args.path, tool=args.tool, sizes=args.size or None,
                                                      args=args.args, **_snippet_options(args)), lambda r: r.clean)


def _profile(args) -> int:
    return _report(args.path, lambda: profiler.profile(args.path, variant=args.variant, size=args.size,
                                                     kernel=args.kernel, args=args.args), lambda p: p.available)


def _exec(args) -> int:
    from pathlib import Path

    from jitlab.worker import execute

    try:
        stdin = None if args.stdin is None else sys.stdin.buffer.read() if args.stdin == "-" else Path(args.stdin).read_bytes()
    except OSError as e:
        print(f"jitlab exec: --stdin {args.stdin}: {e.strerror}; name a readable file, or - for this terminal's input",
              file=sys.stderr)
        return 1
    defines = defines_from(args.define)
    try:
        run = execute.run_program(args.path, args.args, stdin=stdin, timeout=args.timeout or None, arch=args.arch,
                                  defines=defines, cflags=args.cflag, cuda_cflags=args.nvcc_flag, ldflags=args.ldflag)
    except JitlabError as e:
        print(_about(args.path, e), file=sys.stderr)
        return 1
    except BrokenPipeError:  # the reader went away (`| head`): the program is killed; end quietly, as SIGPIPE would
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so exiting does not flush into the closed pipe
        return 141  # 128 + SIGPIPE
    if run.timed_out:
        return 124  # as timeout(1) says it
    if run.output_lost and run.returncode == 0:
        return 1  # its output was not all delivered: not a success
    return 128 - run.returncode if run.returncode < 0 else run.returncode  # a signal as a shell says it


def _export(args) -> int:
    from jitlab.tools import export

    try:
        out = export.export(args.path, args.out or f"{export.module_name(args.path, args.name)}_package",
                            name=args.name, force=args.force)
        name = export.module_name(args.path, args.name)
        needs, missing = export.build_needs(args.path)
    except JitlabError as e:
        print(_about(args.path, e), file=sys.stderr)
        return 1
    print(f"{args.path}: exported as the package `{name}` -> {out}")
    print(f"  building it needs:  {needs}")
    for what in missing:
        print(f"  missing here:       {what}")
    print(f"  build and install:  pip install --no-build-isolation {out}")
    print(f"  then:               python -c \"import {name}; help({name})\"")
    return 0


def _clean(args) -> int:
    from jitlab.config import cache_dir

    try:
        done = api.clean(older_than_days=args.older_than_days, headers=args.headers)
    except ValueError as e:
        print(f"jitlab clean: {e}", file=sys.stderr)
        return 2
    n = done.removed
    print(f"removed {n} build folder{'s' if n != 1 else ''} from {cache_dir()}")
    if done.busy:
        print(f"left {done.busy} that another process is building")
    if not args.headers and (cache_dir() / "pch").is_dir():
        print(f"kept the precompiled torch headers in {cache_dir() / 'pch'} (`--headers` deletes them too)")
    if done.left:
        names = ", ".join(p.name for p in done.left[:8]) + (" …" if len(done.left) > 8 else "")
        print(f"left {len(done.left)} item{'s' if len(done.left) != 1 else ''} jitlab did not make: {names}")
    return 0


def _run(args) -> int:
    from jitlab.judge import runner

    archs = tuple(a for a in args.arch.split(",") if a) if args.arch else config.DEFAULT_ARCHS
    failed = runner.main(args.paths, archs, args.max_size, time_it=not args.no_bench,
                         compile_reference=not args.no_compile)
    return 1 if failed else 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="jitlab", description="JIT CUDA kernel playground for PyTorch")
    p.add_argument("--version", action="version", version=f"jitlab {config.VERSION}")
    sub = p.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build snippets into the cache (prints resource usage)")
    b.add_argument("paths", nargs="+", help=".cu/.cpp files or folders")
    b.add_argument("--compile-only", action="store_true", help="compile CUDA without a GPU (needs --arch)")
    b.add_argument("--arch", help="comma-separated archs, e.g. sm_75,sm_90 (default: this GPU)")
    b.add_argument("--mode", default="auto", choices=["auto", "kernel", "torch"])
    b.add_argument("--engine", default="auto", choices=["auto", "nvrtc", "nvcc"],
                   help="CUDA compiler: NVRTC in process for kernel-only .cu files it compiles (auto), or nvcc")
    b.add_argument("--device", default="auto", choices=["auto", "cuda", "cpu"], help="auto: a GPU, else the CPU "
                   "emulator for a kernel-only .cu (said once); cuda: a GPU build (--compile-only without one); cpu")
    b.add_argument("-D", "--define", action="append", help="preprocessor macro, NAME or NAME=VALUE")
    b.add_argument("--nvcc-flag", action="append", default=[], help="extra nvcc flag (repeatable)")
    b.add_argument("--cflag", action="append", default=[], help="extra C++ compiler flag (repeatable)")
    b.set_defaults(func=_build)
    x = sub.add_parser("exec", help="build a program (a .cu/.cpp with int main) through the cache and run it, "
                                    "as `nvcc prog.cu -o prog && ./prog ARGS`; exit status: the program's")
    x.add_argument("path", help="a .cu/.cpp file with main (or a folder, one of whose files has it)")
    x.add_argument("args", nargs="*", help="the program's arguments, after --")
    x.add_argument("--timeout", type=float, default=60.0, help="seconds before the program is killed (default 60; 0: none)")
    x.add_argument("--stdin", metavar="FILE", help="a file for its standard input (- : this terminal's input)")
    x.add_argument("--arch", help="comma-separated archs (default: this GPU)")
    x.add_argument("-D", "--define", action="append", help="preprocessor macro, NAME or NAME=VALUE")
    x.add_argument("--nvcc-flag", action="append", default=[], help="extra nvcc flag (repeatable)")
    x.add_argument("--cflag", action="append", default=[], help="extra host compiler flag (repeatable)")
    x.add_argument("--ldflag", action="append", default=[], help="extra linker flag or library, e.g. -lcublas")
    x.set_defaults(func=_exec)
    i = sub.add_parser("inspect", help="resources, occupancy, PTX and SASS of a CUDA snippet's kernels (no GPU needed)")
    i.add_argument("path", help="a .cu file or a folder")
    i.add_argument("--arch", default="sm_90", help="comma-separated archs (default sm_90)")
    i.add_argument("--kernel", help="only this kernel")
    i.add_argument("--block", type=int, default=256, help="threads per block for the occupancy (default 256)")
    i.add_argument("--smem", type=int, default=0, metavar="BYTES", help="dynamic shared memory per block (default 0)")
    i.add_argument("--ptx", action="store_true", help="print the PTX with the source lines interleaved")
    i.add_argument("--sass", action="store_true",
                   help="print the SASS with the source lines interleaved (needs nvdisasm, and cuobjdump for nvcc "
                        "builds: pip install nvidia-cuda-nvdisasm nvidia-cuda-cuobjdump)")
    i.add_argument("--raw", action="store_true",
                   help="print the SASS as cuobjdump -sass lists it: encodings and padding, no source lines")
    i.set_defaults(func=_inspect)
    k = sub.add_parser("check", help="build and check snippets against their NAME.ref.py in a worker process "
                                     "(crashes and hangs end the worker, not jitlab)")
    k.add_argument("paths", nargs="+", help="kernel files or folders with a NAME.ref.py beside them")
    k.add_argument("--timeout", type=float, help=f"seconds before a hung kernel is stopped (default "
                                                  f"{config.CHECK_TIMEOUT:g}; KernelBench solutions 300)")
    k.add_argument("--in-process", action="store_true", help="run in this process instead of a worker")
    k.add_argument("--show-output", action="store_true", help="print what the kernel printed even when it passes")
    k.add_argument("--ref", help="one reference for every snippet (a folder of submissions); checks them as a batch")
    k.add_argument("--gpus", type=int, help="check as a batch, one worker per GPU on N GPUs (CUDA_VISIBLE_DEVICES "
                                            "picks which); for C++ snippets N CPU workers")
    k.add_argument("--cluster", help="check as a batch on Dask: 'local', or a scheduler's tcp://host:port")
    k.add_argument("--device", choices=["auto", "cuda", "cpu"], help="cpu (auto without a GPU): a kernel-only .cu on "
                   "the CPU emulator, races and bounds checked, untimed; KernelBench pairs: a CPU problem's C++ solutions")
    kb = k.add_argument_group("KernelBench pairs (problem.py + solutions, or folders of pair folders)")
    kb.add_argument("--problem", help="the problem file (class Model, get_inputs) every solution given answers")
    kb.add_argument("--trials", type=int, default=5, help="correctness trials, each on get_inputs() under its seed (default 5)")
    kb.add_argument("--no-time", action="store_true", help="check only: do not time the right ones")
    kb.add_argument("--no-compile", action="store_true", help="time against Model in eager mode only, not torch.compile")
    kb.add_argument("--compile-only", action="store_true", help="build only, no GPU needed (CUDA for --arch, default sm_90)")
    kb.add_argument("--arch", help="the arch of --compile-only builds (default sm_90)")
    kb.add_argument("-j", "--jobs", type=int, help="compilers at once, as MAX_JOBS (default: the CPU cores)")
    kb.add_argument("--store", help="the results file (default <cache>/results/kernelbench.jsonl); a rerun skips what it holds")
    kb.add_argument("--json", action="store_true", help="print the grades as JSON instead of the table")
    k.set_defaults(func=_check)
    s = sub.add_parser("sanitize", help="check a snippet under compute-sanitizer; findings at your file:line")
    s.add_argument("path", help="a kernel file or folder with a NAME.ref.py beside it")
    s.add_argument("--tool", default="memcheck", choices=["memcheck", "racecheck", "initcheck", "synccheck"])
    s.set_defaults(func=_sanitize)
    for sp in (k, s):
        sp.add_argument("--variant", help="one version only: original, or a name in the ref's VARIANTS")
        sp.add_argument("--size", type=int, action="append", help="size to check (repeatable; default: the ref's SIZES)")
        sp.add_argument("--debug", action="store_true", help="debug build: -G, asserts on")
        sp.add_argument("-D", "--define", action="append", help="preprocessor macro, NAME or NAME=VALUE")
    pr = sub.add_parser("profile", help="Nsight Compute figures for a snippet's kernels: duration, DRAM %% of peak, "
                                        "occupancy, top stall reasons")
    pr.add_argument("path", help="a kernel file or folder with a NAME.ref.py beside it")
    pr.add_argument("--variant", help="the version to run (default: original)")
    pr.add_argument("--size", type=int, help="input size (default: the ref's BENCH_SIZES, at most 2^24)")
    pr.add_argument("--kernel", help="only this kernel")
    pr.set_defaults(func=_profile)
    for sp in (s, pr):
        sp.add_argument("args", nargs="*", help="a program's arguments, after -- (a file with main runs as it is)")
    e = sub.add_parser("export", help="write a snippet as an installable package (setup.py, the seeds' way); "
                                      "says what building it needs and what this environment lacks")
    e.add_argument("path", help="a .cu/.cpp file or a folder")
    e.add_argument("--out", help="the package folder (default: ./NAME_package)")
    e.add_argument("--name", help="the Python package name (default: the snippet's name)")
    e.add_argument("--force", action="store_true", help="overwrite the package's files in a non-empty --out")
    e.set_defaults(func=_export)
    t = sub.add_parser("tune", help="sweep a snippet's #defines over sizes on every GPU (or a Dask cluster); "
                                    "prints the best per size and GPU and writes NAME.tuned.json",
                       epilog="The space is the ref's TUNE (defines, constraints, sizes, threads, shared, run); "
                              "-D and --constraint replace its parts. Results are appended to the store as each "
                              "point ends: a killed sweep resumes, a rerun skips known points.")
    t.add_argument("path", help="a kernel file or folder with a NAME.ref.py beside it")
    t.add_argument("-D", "--define", action="append", metavar="NAME=V1,V2", help="an axis: a define's values (repeatable)")
    t.add_argument("--constraint", action="append", help="an expression over the defines, e.g. 'BLOCK * ITEMS <= 4096'")
    t.add_argument("--size", type=int, action="append", help="a problem size (repeatable; default: the ref's)")
    t.add_argument("--threads", help="threads per block of a configuration, an expression (for pruning), e.g. BLOCK")
    t.add_argument("--budget", type=int, help="the most configurations to try (above it, a search steered by the timings so far)")
    t.add_argument("--time-limit", type=float, help="seconds after which no new point starts; the best so far is kept")
    t.add_argument("--seed", type=int, default=0, help="the search's seed (default 0)")
    t.add_argument("--gpus", type=int, help="use N GPUs, one worker each (default: every GPU here; "
                                            "CUDA_VISIBLE_DEVICES picks which)")
    t.add_argument("--cluster", help="run on Dask: 'local' (one worker per GPU) or a scheduler's tcp://host:port")
    t.add_argument("--timeout", type=float, default=config.CHECK_TIMEOUT,
                   help=f"seconds one point may take before its worker is stopped (default {config.CHECK_TIMEOUT:g})")
    t.add_argument("--store", help="the results file (default: <cache>/results/NAME.tune.jsonl)")
    t.add_argument("--rep-s", type=float, default=0.2, help="timing budget per point in seconds (default 0.2)")
    t.add_argument("--no-export", action="store_true", help="do not write NAME.tuned.json and the chart")
    t.add_argument("--quiet", action="store_true", help="print only the result table")
    t.set_defaults(func=_tune)
    c = sub.add_parser("clean", help="delete cached builds")
    c.add_argument("--older-than-days", type=float, default=None, help="keep builds used in the last N days")
    c.add_argument("--headers", action="store_true",
                   help="also delete what is made once per toolchain: torch's precompiled headers, the binder, the emulator's runtime")
    c.set_defaults(func=_clean)
    for name, helptext in (("run", "build, check and time kernels against their torch references (default: kernels/)"),
                           ("demo", "the same as `run` over kernels/: every kernel against its torch reference")):
        r = sub.add_parser(name, help=helptext,
                           epilog="Each row is printed as soon as it is measured. A build or a timing that passes "
                                  "JITLAB_PROGRESS_AFTER seconds (default 2; off for never) shows what runs and "
                                  "for how long; ratio columns read '× faster than torch'.")
        r.add_argument("paths", nargs="*", help="kernel files or folders (default: kernels/)")
        r.add_argument("--arch", help=f"archs to compile-check without a GPU (default {','.join(config.DEFAULT_ARCHS)})")
        r.add_argument("--max-size", type=int, default=None, help="skip sizes above this")
        r.add_argument("--no-bench", action="store_true", help="check only, do not time")
        r.add_argument("--no-compile", action="store_true", help="do not time torch.compile of the reference")
        r.set_defaults(func=_run)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    # After `--`, everything is the program's (argparse would give a positional list only what precedes options).
    tail = argv[argv.index("--") + 1:] if "--" in argv else []
    args = parser().parse_args(argv[:len(argv) - len(tail) - 1] if "--" in argv else argv)
    if tail and not hasattr(args, "args"):
        parser().error(f"`-- {' '.join(tail)}`: only exec, sanitize and profile take a program's arguments")
    if hasattr(args, "args"):
        args.args = [*args.args, *tail]
    try:
        return args.func(args)
    except JitlabError as e:  # every error jitlab raises on purpose says what to do: no traceback
        print(f"jitlab {args.command}: {_about(getattr(args, 'path', ''), e)}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
