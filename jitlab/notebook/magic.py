"""``%load_ext jitlab`` and the ``%%cuda NAME`` cell magic (``%%cpp NAME`` for C++ snippets).

The cell body is saved atomically to ``kernels/NAME.cu`` (the replaced version goes to the history),
built, and bound as ``NAME`` in the notebook: ``NAME(...)`` calls the snippet's function when it has
one (or one called NAME), ``NAME.f(...)`` calls any (``NAME["f"]`` one the module's own attributes
shadow, such as ``build``), and ``NAME.build`` is the build. NAME may not hide a Python builtin or a
value the notebook bound itself (``torch``, ``np``) unless ``--force``; a name a jitlab magic bound is
rebound freely. Compile errors are shown in the cell with the cell's own line numbers; a bad magic
line says what is wrong and prints the help. A thin layer: the work is in :mod:`jitlab.snippets`, :func:`jitlab.load` and
:mod:`jitlab.judge.runner`.

Without a CUDA GPU a kernel-only ``%%cuda`` cell builds and runs on the CPU emulator (``--device`` chooses);
one the emulator cannot run says so in one line (:mod:`jitlab.notebook.nogpu`, which
``%load_ext jitlab`` also installs for every other cell); ``--compile-only`` still compiles it, for
:data:`jitlab.config.DEFAULT_ARCHS` unless ``--arch`` names others, and shows each kernel's
registers, shared and local memory and spills.

JupyterLab 4 gives a notebook's cells one language, the kernel's; jitlab's labextension
(``jitlab/notebook/labextension``, installed to ``share/jupyter/labextensions/jitlab-cells``) gives a
cell that starts with ``%%cuda`` or ``%%cpp`` C++ highlighting.
"""

from __future__ import annotations

import argparse
import builtins
import difflib
import inspect
import shlex
from pathlib import Path

from jitlab import config, snippets
from jitlab.errors import CompileError, JitlabError
from jitlab.jit import api, diagnostics, emulator_support, prepare, resources, toolchain
from jitlab.jit.flags import defines_from
from jitlab.jit.sources import is_program, locate
from jitlab.notebook import nogpu
from jitlab.notebook.text import say

HELP = """\
%%{magic} NAME [options]      ({other})
  Saves the cell to kernels/NAME{ext}, builds it, and binds it as NAME: NAME(...) calls its function
  when it has one (or one called NAME), NAME.f(...) calls any, NAME.build is the build.
  A cell with int main() is a program: saved, built and run, its output in the cell; NAME is the run.
  -D NAME[=VALUE]       preprocessor macro (repeatable)
  --arch sm_75,sm_90    archs to build for (default: this GPU; without one, {archs})
  --compile-only        compile only, and show each kernel's registers and memory; nothing is bound
  --device D            auto (a GPU, else the CPU emulator for a kernel-only snippet), cuda, or cpu
  --flag FLAG           extra nvcc/compiler flag (repeatable)
  --dir DIR             folder for the snippet (default: kernels, or the project's ../kernels)
  --check               check it against kernels/NAME.ref.py after building
  --bench               check and time it against kernels/NAME.ref.py
  --args "A B"          a program's arguments
  --timeout S           seconds before a program is stopped (default 60; 0: none)
  --exercise            a lesson's exercise: save to kernels/exercises/NAME{ext} and check it
                        (PASS, or FAIL with the reasons and a hint; see jitlab.notebook.exercises)
  --force               bind NAME even over a Python builtin or a name the notebook bound itself
  -h, --help            this help
"""
OPTIONS = ("-D", "--arch", "--compile-only", "--device", "--flag", "--dir", "--check", "--bench", "--exercise", "--args", "--timeout",
           "--force", "--help")
#: Archs a compile-only build is for when there is no GPU to ask and ``--arch`` names none.
NO_GPU_ARCHS = ",".join(config.DEFAULT_ARCHS)


def help_text(magic: str = "cuda") -> str:
    """The magic's help, for ``%%cuda`` or ``%%cpp``."""
    other = "or %%cpp NAME for a C++ snippet" if magic == "cuda" else "or %%cuda NAME for a CUDA snippet"
    return HELP.format(magic=magic, other=other, ext=".cu" if magic == "cuda" else ".cpp", archs=NO_GPU_ARCHS)


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise ValueError(message)


def parse_line(line: str, magic: str = "cuda") -> argparse.Namespace:
    """Parse the magic's line.

    Args:
        line: What follows ``%%cuda`` (or ``%%cpp``) on the cell's first line.
        magic: ``"cuda"`` or ``"cpp"``, for the messages.

    Returns:
        The options; ``help`` is true for ``-h``/``--help`` (nothing else is checked then).

    Raises:
        ValueError: With the reason: an unknown option (and the options there are), a missing or
            second NAME, an option without its value.
        SnippetError: NAME is not a valid kernel name.
    """
    p = _Parser(prog=f"%%{magic}", add_help=False, allow_abbrev=False)
    p.add_argument("name", nargs="?")
    p.add_argument("-D", "--define", action="append", default=[])
    p.add_argument("--arch")
    p.add_argument("--compile-only", action="store_true")
    p.add_argument("--device", default="auto", choices=api.DEVICES)
    p.add_argument("--flag", action="append", default=[])
    p.add_argument("--dir")
    p.add_argument("--check", action="store_true")
    p.add_argument("--bench", action="store_true")
    p.add_argument("--exercise", action="store_true")
    p.add_argument("--args", default="")
    p.add_argument("--timeout", type=float, default=60.0)
    p.add_argument("--force", action="store_true")
    p.add_argument("-h", "--help", action="store_true")
    try:
        args, extra = p.parse_known_args(shlex.split(line))
    except ValueError as e:
        if "expected one argument" in str(e):  # also `--flag -O3`: argparse takes -O3 for an option
            raise ValueError(f"{e}; a value that starts with - is written with =, e.g. --flag=-O3") from None
        raise
    if args.help:
        return args
    unknown = [x for x in extra if x.startswith("-")]
    if unknown:
        opt = unknown[0].split("=", 1)[0]
        close = difflib.get_close_matches(opt, [o for o in OPTIONS if o.startswith("--")], n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]}?" if close else ""
        raise ValueError(f"unknown option {opt}{hint} (options: {', '.join(OPTIONS)})")
    if args.name is None:
        ext = ".cu" if magic == "cuda" else ".cpp"
        raise ValueError(f"the cell needs a NAME, the snippet's name (kernels/NAME{ext} and the name it is bound "
                         f"to): %%{magic} NAME [options], e.g. %%{magic} saxpy --check")
    if extra:
        raise ValueError(f"one NAME only: {args.name!r}, then {' '.join(map(repr, extra))}, which is not an option "
                         f"(options: {', '.join(OPTIONS)})")
    if not args.exercise:
        args.dir = args.dir or str(locate("kernels"))  # ../kernels from notebooks/
    snippets.check_name(args.name)
    return args


def cell_errors(err: CompileError, path: Path, cell: str) -> str:
    """The compile error with the cell's line numbers (the body starts on the cell's line 2)."""
    lines = [err.summary.replace(str(path), f"cell ({path.name})")]
    body = cell.splitlines()
    shown = 0
    for d in err.diagnostics:
        if d.severity == "warning" or shown >= diagnostics.MAX_SHOWN:
            continue
        if Path(d.path or "/").resolve() == path.resolve() and 1 <= d.line <= len(body):
            lines.append(f"cell line {d.line + 1}: {d.severity}: {d.message}")
            lines.append(f"    {body[d.line - 1]}")
            if d.column:
                lines.append("    " + " " * (len(body[d.line - 1][: d.column - 1].expandtabs(8))) + "^")
        else:
            lines.append(diagnostics.render(d, {}))
        shown += 1
    return "\n".join(lines)


def line_help(magic: str, line: str) -> str:
    """What ``%cuda LINE`` (one %) prints: the help, after a pointer to the cell form unless asked for help."""
    asked = line.strip() in ("", "-h", "--help")
    lead = "" if asked else (f"%{magic} is the help; a snippet is a cell: `%%{magic} {line.strip()}` on its first "
                             f"line (two %), the code below it\n\n")
    return lead + help_text(magic)


def run_cell(line: str, cell: str, namespace: dict, ext: str = ".cu") -> object | None:
    """Do what ``%%cuda`` does; returns the module (or the build, compile-only), ``None`` on an error shown."""

    magic = "cuda" if ext == ".cu" else "cpp"
    try:
        args = parse_line(line, magic)
    except (ValueError, JitlabError) as e:
        say(f"jitlab: {e}\n\n{help_text(magic)}")
        return None
    if args.help:
        say(help_text(magic))
        return None
    clash = None if args.force else name_clash(args.name, namespace)
    if clash:
        say(f"jitlab: %%{magic} {args.name} would rebind {args.name}, {clash}; choose another NAME "
              f"(e.g. {args.name}_kernel), or add --force to bind it anyway")
        return None
    if args.exercise:
        return run_exercise(args, cell, namespace, ext)
    path = snippets.save(Path(args.dir) / f"{args.name}{ext}", cell)
    if is_program(path):
        return run_program_cell(args, path, cell, namespace, ext)
    if ext == ".cu" and not args.compile_only and on_the_emulator(args, path):
        return run_on_the_emulator(args, path, cell, namespace)
    if ext == ".cu" and not args.compile_only and not toolchain.gpu_available():  # never loadable here
        nogpu.skipped([args.name], no_gpu_message(args, line))
        return None
    defines, flags = cell_options(args, ext)

    def make():
        if args.compile_only:
            b = api.build(path, arch=compile_archs(args, ext), defines=defines, compile_only=True, **flags)
            say(f"{args.name}: compiled for {', '.join(b.archs)} ({'cache hit' if b.cached else f'{b.seconds:.2f} s'})")
            say("\n".join(resources.usage_lines(b.resources)))
            if args.check or args.bench:
                say(f"(--{'bench' if args.bench else 'check'} is not run with --compile-only: nothing was loaded)")
            return b
        return api.load(path, arch=args.arch, defines=defines, device=args.device, **flags)

    m = shown(make, path, cell)
    if m is None or args.compile_only:
        return m
    namespace[args.name] = m
    state = "cache hit" if m.build.cached else f"built in {m.build.seconds:.2f} s"
    say(f"{args.name}: {state}; functions: {', '.join(m.functions)}; {how_to_call(args.name, m)}")
    if args.check or args.bench:
        from jitlab.judge import refs, runner

        try:
            kernels = refs.find_kernels(path)
        except JitlabError as e:
            say(f"jitlab: cannot check {args.name}: {e}")
            return m
        rows = runner.run_kernel(kernels[0], "cuda" if ext == ".cu" else "cpu", time_it=args.bench)
        runner.print_table(rows)
    return m


def on_the_emulator(args, path: Path) -> bool:
    """Whether a ``%%cuda`` cell runs on the CPU emulator: ``--device cpu``, or ``auto`` (the default) on a
    machine without a GPU for a snippet the emulator runs (what :func:`jitlab.load` does with ``device="auto"``)."""
    if args.device == "auto":
        return not toolchain.gpu_available() and not emulator_support.cannot_run(path)
    return args.device == "cpu"


def run_on_the_emulator(args, path: Path, cell: str, namespace: dict):
    """A ``%%cuda NAME`` cell on the CPU emulator: built, bound as NAME and, with ``--check``/``--bench``, checked
    there (never timed: ``--bench`` says why), as a cell on a GPU is. Returns the module, ``None`` on an error shown."""
    from jitlab.worker import isolate

    defines, _ = cell_options(args, ".cu")
    m = shown(lambda: api.load(path, defines=defines, device=args.device), path, cell)
    if m is None:
        return None
    namespace[args.name] = m
    state = "cache hit" if m.build.cached else f"built in {m.build.seconds:.2f} s"
    say(f"{args.name}: {state} for the CPU emulator; functions: {', '.join(m.functions)}; "
          f"{how_to_call(args.name, m)} with CPU tensors")
    if args.check or args.bench:
        try:
            say(isolate.check_snippet(path.resolve(), device="cpu", defines=defines))  # the worker has its own cwd
        except JitlabError as e:
            say(f"jitlab: cannot check {args.name}: {e}")
    if args.bench:
        say(f"(--bench: {emulator_support.NO_TIMING})")
    return m


def cell_options(args, ext: str) -> tuple[dict, dict]:
    """The magic line's ``-D`` macros and ``--flag`` flags as ``load``/``build`` keywords: ``(defines, flags)``."""
    return defines_from(args.define), ({"cuda_cflags": args.flag} if ext == ".cu" else {"cflags": args.flag})


def shown(make, path: Path, cell: str):
    """``make()``, or ``None`` once its error is printed in the cell (a compile error at the cell's lines)."""
    try:
        return make()
    except CompileError as e:
        say(cell_errors(e, path, cell))
    except JitlabError as e:
        say(f"jitlab: {e}")
    return None


def run_program_cell(args, path: Path, cell: str, namespace: dict, ext: str):
    """A cell with ``main``: build the saved program and run it, its output streamed into the cell.

    Without a GPU (or with ``--compile-only``) a CUDA program is built, not run. Binds NAME to the
    :class:`~jitlab.worker.execute.Run` (or the build); returns it, ``None`` on an error shown.
    """
    from jitlab.worker import execute

    defines, flags = cell_options(args, ext)
    idle = args.compile_only or (ext == ".cu" and not toolchain.gpu_available())

    def make():
        if not idle:
            return execute.run_program(path, shlex.split(args.args), timeout=args.timeout or None, arch=args.arch,
                                      defines=defines, **flags)
        b = execute.build_program(path, arch=compile_archs(args, ext), defines=defines, **flags)
        built = f"built ({'cache hit' if b.cached else f'{b.seconds:.2f} s'}) for {', '.join(b.archs)}"
        if args.compile_only:
            say(f"{args.name}: program {built}; not run: --compile-only")
        else:
            nogpu.skipped([], f"on a GPU this cell runs the program {args.name}, its output here; it was {built}, "
                              f"not run")
        return b

    result = shown(make, path, cell)
    if result is None:
        return None
    namespace[args.name] = result
    return result


def name_clash(name: str, namespace: dict) -> str | None:
    """What binding ``name`` would hide: a Python builtin, or a value the notebook bound that jitlab did not make.

    Returns:
        The clash in words (``"a Python builtin"``, ``"bound in this notebook to the module torch"``), or
        ``None`` when ``name`` is free or holds what a jitlab magic bound (a module, build or run).
    """
    if name in namespace:
        value = namespace[name]
        if type(value).__module__.split(".")[0] == "jitlab":
            return None
        what = f"the module {value.__name__}" if inspect.ismodule(value) else f"a value of type {type(value).__name__}"
        return f"bound in this notebook to {what}"
    return "a Python builtin" if hasattr(builtins, name) else None


def how_to_call(name: str, m) -> str:
    """How to call what the cell bound: ``NAME(...)`` when the module forwards to one function; a function
    the module's own attributes shadow (``build``) as ``NAME["build"](...)``."""
    target = m._call_target()
    shadowed = set(getattr(m, "shadowed", ()))
    others = [f"{name}[{f!r}](...)" if f in shadowed else f"{name}.{f}(...)" for f in m.functions if f != target]
    if target is None:
        return "call " + ", ".join(others)
    if target != name:
        return f"call {name}(...) (that is {name}{f'[{target!r}]' if target in shadowed else f'.{target}'}(...))"
    return f"call {name}(...)" + (f"; also {', '.join(others)}" if others else "")


def compile_archs(args, ext: str) -> str | None:
    """The archs of a build that runs nothing: ``--arch``, else this GPU's, else :data:`NO_GPU_ARCHS`."""
    if args.arch or ext != ".cu" or toolchain.gpu_available():
        return args.arch
    return NO_GPU_ARCHS


def no_gpu_message(args, line: str) -> str:
    """What a ``%%cuda`` cell that needs a GPU does on one, and the same cell that compiles here."""
    keep = [t for t in shlex.split(line) if t not in ("--check", "--bench")]
    runs = f" and --{'bench' if args.bench else 'check'} runs it" if args.check or args.bench else ""
    return (f"on a GPU %%cuda {args.name} builds it and binds {args.name}{runs}; here it is saved to "
            f"{Path(args.dir) / (args.name + '.cu')}, not built (`%%cuda {shlex.join([*keep, '--compile-only'])}` "
            f"compiles it and shows its registers and memory)")


def run_exercise(args, cell: str, namespace: dict, ext: str = ".cu"):
    """``--exercise``: save the cell over the exercise's file, then :func:`jitlab.notebook.exercises.check` it."""
    from jitlab.notebook import exercises

    try:
        ex = exercises.get(args.name)
    except JitlabError as e:
        say(f"jitlab: {e}")
        return None
    path = snippets.save(Path(args.dir or ex.path.parent) / f"{args.name}{ext}", cell)
    result = exercises.check(args.name, path=path)
    if isinstance(result.error, CompileError):
        result.error_text = cell_errors(result.error, path, cell)
    if result.module is not None:
        namespace[args.name] = result.module
    try:
        from IPython.display import display
    except ImportError:
        say(result)
    else:
        display(result)
    return result


def load_ipython_extension(ipython) -> None:
    """Register ``%%cuda`` and ``%%cpp``, report cells that need a GPU in one line
    (:func:`jitlab.notebook.nogpu.install`), and start precompiling torch's headers in the background
    (:func:`jitlab.jit.prepare.start`: one line, once, unless made already or ``JITLAB_PREPARE_HEADERS=0``);
    called by ``%load_ext jitlab``."""
    from IPython.core.magic import Magics, cell_magic, line_magic, magics_class

    nogpu.install(ipython)
    prepare.start()

    @magics_class
    class JitlabMagics(Magics):
        # `%%cuda -h` alone in a cell is refused by IPython (an empty cell) unless a line magic of the
        # name exists, which it then names: `%cuda -h` prints the help.
        @line_magic("cuda")
        def cuda_help(self, line):
            """``%cuda -h``: the help of ``%%cuda`` (the code goes in the cell, below ``%%cuda NAME``)."""
            say(line_help("cuda", line))

        @line_magic("cpp")
        def cpp_help(self, line):
            """``%cpp -h``: the help of ``%%cpp``."""
            say(line_help("cpp", line))

        @cell_magic
        def cuda(self, line, cell):
            """Save the cell as kernels/NAME.cu, build it and bind it as NAME (``%%cuda --help``)."""
            run_cell(line, cell, self.shell.user_ns, ".cu")

        @cell_magic
        def cpp(self, line, cell):
            """Save the cell as kernels/NAME.cpp, build it and bind it as NAME (``%%cpp --help``)."""
            run_cell(line, cell, self.shell.user_ns, ".cpp")

    ipython.register_magics(JitlabMagics)
