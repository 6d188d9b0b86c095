"""``%load_ext jitlab`` and the ``%%cuda NAME`` cell magic (``%%cpp NAME`` for C++ snippets).

The cell body is saved atomically to ``kernels/NAME.cu`` (the replaced version goes to the history),
built, and bound as ``NAME`` in the notebook. Compile errors are shown in the cell with the cell's
own line numbers; a bad magic line prints the help. A thin layer: the work is in
:mod:`jitlab.snippets`, :func:`jitlab.load` and :mod:`jitlab.runner`.
"""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from . import diagnostics, snippets
from .errors import CompileError, JitlabError

HELP = """\
%%cuda NAME [options]      (or %%cpp NAME for a C++ snippet)
  Saves the cell to kernels/NAME.cu, builds it, and binds the module as NAME.
  -D NAME[=VALUE]       preprocessor macro (repeatable)
  --arch sm_75,sm_90    archs to build for (default: this GPU)
  --compile-only        compile without a GPU (needs --arch); nothing is bound
  --flag FLAG           extra nvcc/compiler flag (repeatable)
  --dir DIR             folder for the snippet (default: kernels)
  --check               check it against kernels/NAME.ref.py after building
  --bench               check and time it against kernels/NAME.ref.py
  --exercise            a lesson's exercise: save to kernels/exercises/NAME.cu and check it
                        (PASS, or FAIL with the reasons and a hint; see jitlab.exercises)
"""


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise ValueError(message)


def parse_line(line: str) -> argparse.Namespace:
    """Parse the magic's line; raises ValueError with the reason."""
    p = _Parser(prog="%%cuda", add_help=False)
    p.add_argument("name")
    p.add_argument("-D", "--define", action="append", default=[])
    p.add_argument("--arch")
    p.add_argument("--compile-only", action="store_true")
    p.add_argument("--flag", action="append", default=[])
    p.add_argument("--dir")
    p.add_argument("--check", action="store_true")
    p.add_argument("--bench", action="store_true")
    p.add_argument("--exercise", action="store_true")
    args = p.parse_args(shlex.split(line))
    if not args.exercise:
        args.dir = args.dir or "kernels"
    snippets.check_name(args.name)
    if args.compile_only and not args.arch:
        raise ValueError("--compile-only needs --arch, e.g. --arch sm_75,sm_90")
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


def run_cell(line: str, cell: str, namespace: dict, ext: str = ".cu") -> object | None:
    """Do what ``%%cuda`` does; returns the module (or the build, compile-only), ``None`` on an error shown."""
    import jitlab

    try:
        args = parse_line(line)
    except (ValueError, JitlabError) as e:
        print(f"jitlab: {e}\n\n{HELP}")
        return None
    if args.exercise:
        return run_exercise(args, cell, namespace, ext)
    path = snippets.save(Path(args.dir) / f"{args.name}{ext}", cell)
    defines = dict(d.split("=", 1) if "=" in d else (d, None) for d in args.define)
    flags = {"cuda_cflags": args.flag} if ext == ".cu" else {"cflags": args.flag}
    try:
        if args.compile_only:
            b = jitlab.build(path, arch=args.arch, defines=defines, compile_only=True, **flags)
            print(f"{args.name}: compiled for {', '.join(b.archs)} ({'cache hit' if b.cached else f'{b.seconds:.2f} s'})")
            return b
        m = jitlab.load(path, arch=args.arch, defines=defines, **flags)
    except CompileError as e:
        print(cell_errors(e, path, cell))
        return None
    except JitlabError as e:
        print(f"jitlab: {e}")
        return None
    namespace[args.name] = m
    state = "cache hit" if m.build.cached else f"built in {m.build.seconds:.2f} s"
    print(f"{args.name}: {state}; functions: {', '.join(m.functions)}")
    if args.check or args.bench:
        from . import runner

        try:
            kernels = runner.find_kernels(path)
        except JitlabError as e:
            print(f"jitlab: cannot check {args.name}: {e}")
            return m
        rows = runner.run_kernel(kernels[0], "cuda" if ext == ".cu" else "cpu", time_it=args.bench)
        runner.print_table(rows)
    return m


def run_exercise(args, cell: str, namespace: dict, ext: str = ".cu"):
    """``--exercise``: save the cell over the exercise's file, then :func:`jitlab.exercises.check` it."""
    from . import exercises

    try:
        ex = exercises.get(args.name)
    except JitlabError as e:
        print(f"jitlab: {e}")
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
        print(result)
    else:
        display(result)
    return result


def load_ipython_extension(ipython) -> None:
    """Register ``%%cuda`` and ``%%cpp`` (called by ``%load_ext jitlab``)."""
    from IPython.core.magic import Magics, cell_magic, magics_class

    @magics_class
    class JitlabMagics(Magics):
        @cell_magic
        def cuda(self, line, cell):
            """Save the cell as kernels/NAME.cu, build it and bind it as NAME (``%%cuda --help``)."""
            run_cell(line, cell, self.shell.user_ns, ".cu")

        @cell_magic
        def cpp(self, line, cell):
            """Save the cell as kernels/NAME.cpp, build it and bind it as NAME."""
            run_cell(line, cell, self.shell.user_ns, ".cpp")

    ipython.register_magics(JitlabMagics)
