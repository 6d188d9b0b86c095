"""The ``jitlab`` command's arguments: one sub-parser per command (:mod:`jitlab.cli` runs them)."""

from __future__ import annotations

import argparse

from jitlab import config


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
    s = sub.add_parser("sanitize", help="check a snippet under compute-sanitizer; findings at your file:line")
    s.add_argument("path", help="a kernel file or folder with a NAME.ref.py beside it")
    s.add_argument("--tool", default="memcheck", choices=["memcheck", "racecheck", "initcheck", "synccheck"])
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
    for sp in (s, pr):
        sp.add_argument("args", nargs="*", help="a program's arguments, after -- (a file with main runs as it is)")
    e = sub.add_parser("export", help="write a snippet as an installable package (setup.py, the seeds' way); "
                                      "says what building it needs and what this environment lacks")
    e.add_argument("path", help="a .cu/.cpp file or a folder")
    e.add_argument("--out", help="the package folder (default: ./NAME_package)")
    e.add_argument("--name", help="the Python package name (default: the snippet's name)")
    e.add_argument("--force", action="store_true", help="overwrite the package's files in a non-empty --out")
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
    c = sub.add_parser("clean", help="delete cached builds")
    c.add_argument("--older-than-days", type=float, default=None, help="keep builds used in the last N days")
    c.add_argument("--headers", action="store_true",
                   help="also delete what is made once per toolchain: torch's precompiled headers, the binder, the emulator's runtime")
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
    return p
