"""The ``jitlab`` command: ``build``, ``exec``, ``inspect``, ``check``, ``sanitize``, ``profile``, ``export``, ``tune``, ``run`` (``demo``), ``clean``. A thin layer over the library's functions."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time

from jitlab import config
from jitlab.cli_args import parser
from jitlab.errors import CompileError, JitlabError
from jitlab.jit import prepare, processes, resources
from jitlab.jit.flags import defines_from

# Each command imports what it runs where it runs it: torch (3-4 s) only when used, so that `jitlab check` of
# KernelBench pairs starts torch's precompiled headers first (:func:`_check_kernelbench`).


def _build(args) -> int:
    from jitlab.jit import api

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
    from jitlab.judge import kernelbench_pairs

    if args.problem or kernelbench_pairs.recognizes(args.paths):
        return _check_kernelbench(args)
    if args.gpus or args.cluster or args.ref:
        return _check_batch(args)
    from jitlab.worker import isolate

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

    device = "cpu" if args.device == "cpu" else "cuda"  # a KernelBench problem's device: no emulator
    if not args.cluster:  # every build waits for torch's headers: started before torch is imported (3-4 s)
        prepare.ahead(device == "cuda")
    from jitlab.judge import gradebook
    from jitlab.worker import grading

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
    from jitlab.worker import sanitizer

    return _report(args.path, lambda: sanitizer.sanitize(args.path, tool=args.tool, sizes=args.size or None,
                                                      args=args.args, **_snippet_options(args)), lambda r: r.clean)


def _profile(args) -> int:
    from jitlab.worker import profiler

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
    from jitlab.jit import api

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


#: What each command runs (``run`` and ``demo`` are one).
COMMANDS = {"build": _build, "exec": _exec, "inspect": _inspect, "check": _check, "sanitize": _sanitize,
            "profile": _profile, "export": _export, "tune": _tune, "clean": _clean, "run": _run, "demo": _run}


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
        with _ended_by_sigterm():
            return COMMANDS[args.command](args)
    except JitlabError as e:  # every error jitlab raises on purpose says what to do: no traceback
        print(f"jitlab {args.command}: {_about(getattr(args, 'path', ''), e)}", file=sys.stderr)
        return 1


@contextlib.contextmanager
def _ended_by_sigterm():
    """SIGTERM (``timeout``, a job scheduler) ends the command and the processes it started: the compilers making
    torch's headers in the background and the warm workers end with it (Python's default ends the process at
    once, leaving them running). Only where SIGTERM's handling is Python's default.

    Python runs a signal's handler in the main thread between two bytecodes, so a main thread inside a long call
    that does not come back to Python would put the ending off. The C-level handler also writes the signal's
    number to a pipe at once (``signal.set_wakeup_fd``, where nothing else uses it), and a thread reading the
    pipe ends the process too, whichever comes first."""
    ours = threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    if not ours:
        yield
        return
    signal.signal(signal.SIGTERM, _terminated)
    read, write = os.pipe()
    os.set_blocking(write, False)
    before = signal.set_wakeup_fd(write, warn_on_full_buffer=False)
    if before != -1:  # an event loop's: give it back, the handler alone ends the command
        signal.set_wakeup_fd(before)
    else:
        threading.Thread(target=_watch, args=(read,), name="jitlab-sigterm", daemon=True).start()
    try:
        yield
    finally:
        if before == -1:
            signal.set_wakeup_fd(-1)
        else:
            os.close(read)
        os.close(write)  # the watcher reads the pipe's end and returns (it closes the other end)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _watch(fd: int) -> None:
    """Read the signal numbers the C-level handler writes; SIGTERM ends the process from this thread."""
    with open(fd, "rb", buffering=0) as pipe:
        while got := pipe.read(64):
            if int(signal.SIGTERM) in got:
                _terminated(int(signal.SIGTERM), None)


def _terminated(signum, frame):
    """End now, as a process that was killed, after the processes jitlab started (compilers, warm workers); no
    wait for the build threads (they wait for those compilers), and no other exit hook: this may run in the
    middle of any code, torch's import included, and a library's hook may wait on what that code holds."""
    processes.end_everything()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a write this interrupted holds the stream's lock
            stream.flush()
    os._exit(128 + signum)


if __name__ == "__main__":
    sys.exit(main())
