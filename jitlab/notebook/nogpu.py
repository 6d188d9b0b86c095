"""Cells that need a CUDA GPU, on a machine without one: one line each, never a traceback.

``%load_ext jitlab`` calls :func:`install`, which gives IPython a custom exception handler. The kernel
never sees a cell's tags, so the handler goes by the error: :func:`needs_gpu` recognises exactly the
errors that mean "no GPU here" (jitlab's ``ToolchainError`` "no CUDA GPU found …", torch's "Torch not
compiled with CUDA enabled", "Found no NVIDIA driver", "No CUDA GPUs are available"). For those it
prints one line (what the cell does on a GPU, how to get one) and remembers the names the cell would
have bound (:func:`bound_names`); a later ``NameError`` for one of them is one line naming that cell.
Any other error keeps IPython's traceback. A cell reported this way ends as done, not failed, so
"Run All" goes on to the next cell, as it would on a GPU. A ``%%cuda`` cell without a GPU reports
itself through :func:`skipped`.
"""

from __future__ import annotations

import ast
import shlex

from jitlab.errors import ToolchainError

#: Every line this module prints starts with this.
PREFIX = "needs a CUDA GPU"
#: How to get one.
HOW = "To run it, use a machine with an NVIDIA GPU (on Colab: Runtime → Change runtime type → T4 GPU)."
#: Options of ``%%cuda``/``%%cpp`` that take a value (the NAME is the first other word).
_VALUE_OPTIONS = {"-D", "--define", "--arch", "--flag", "--dir", "--args", "--timeout"}

_active: Tracker | None = None  # the tracker of the shell that loaded jitlab last


def needs_gpu(exc: BaseException) -> bool:
    """Whether ``exc`` (or an error it was raised from) means that this machine has no usable CUDA GPU."""
    import torch  # lazy: torch costs 2 s, and this runs only on an error

    while exc is not None:
        text = str(exc)
        if isinstance(exc, ToolchainError) and text.startswith("no CUDA GPU found"):
            return True
        if isinstance(exc, AssertionError) and text == "Torch not compiled with CUDA enabled":
            return True
        if isinstance(exc, RuntimeError) and ("Found no NVIDIA driver on your system" in text
                                              or "No CUDA GPUs are available" in text):
            return True
        # torch.utils.cpp_extension asked to build CUDA code by a CPU build of torch
        if isinstance(exc, OSError) and text.startswith("CUDA_HOME environment variable is not set") \
                and torch.version.cuda is None:
            return True
        exc = exc.__cause__
    return False


def why() -> str:
    """Why this machine cannot run CUDA: torch is a CPU build, or torch sees no GPU."""
    import torch

    return "this torch is a CPU build" if torch.version.cuda is None else "torch sees no CUDA GPU here"


def bound_names(source: str) -> list[str]:
    """The names a cell's (transformed) Python source binds at its top level, in order.

    Assignments, ``def``, ``class``, ``import``, ``for``/``with`` targets; a ``%%cuda NAME`` or
    ``%%cpp NAME`` cell (``get_ipython().run_cell_magic('cuda', 'NAME …', …)``) binds NAME.
    """
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    found: list[tuple[int, int, str]] = []
    for node in _top_level(tree):
        at = (getattr(node, "lineno", 0), getattr(node, "col_offset", 0))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.append((*at, node.name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            found += [(*at, a.asname or a.name.split(".")[0]) for a in node.names if a.name != "*"]
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            found.append((*at, node.id))
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "run_cell_magic" and len(node.args) >= 2:
            magic, line = (a.value if isinstance(a, ast.Constant) else None for a in node.args[:2])
            if magic in ("cuda", "cpp") and isinstance(line, str):
                found += [(*at, n) for n in _magic_name(line)]
    return list(dict.fromkeys(name for *_, name in sorted(found)))


def _top_level(tree):
    """Every node of the cell's own scope: not the insides of functions, classes, lambdas, comprehensions."""
    todo = [tree]
    while todo:
        node = todo.pop(0)
        yield node
        if not isinstance(node, _SCOPES) or node is tree:
            todo += ast.iter_child_nodes(node)
        elif not isinstance(node, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            todo += node.decorator_list


_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp,
           ast.GeneratorExp)


def _magic_name(line: str) -> list[str]:
    """``['NAME']`` from a ``%%cuda``/``%%cpp`` line, ``[]`` if it has none."""
    try:
        words = shlex.split(line)
    except ValueError:
        return []
    after_option = False
    for w in words:
        if not after_option and not w.startswith("-") and w.isidentifier():
            return [w]
        after_option = w in _VALUE_OPTIONS
    return []


def skipped(names: list[str], what: str) -> str:
    """Print the one line for a cell that did not run for want of a GPU, and remember what it binds.

    Args:
        names: What the cell binds on a GPU (a ``%%cuda`` cell: its NAME).
        what: What the cell does on a GPU, a phrase ("%%cuda vadd builds vadd …").

    Returns:
        The line printed.
    """
    line = f"{PREFIX} ({why()}): {what}. {HOW}"
    print(line)
    if _active is not None:
        _active.record(names)
    return line


class Tracker:
    """One shell's record of the names that cells needing a GPU did not bind, and its handlers."""

    def __init__(self, shell):
        self.shell = shell
        self.missing: dict[str, str] = {}  # name -> the cell that would bind it ("cell [7] (`…`)")
        self.cell = ""  # the running cell's source
        self.pending: list[str] = []  # names the running cell did not bind for want of a GPU
        self.handled: BaseException | None = None  # the error reported in one line in this cell

    def pre_run_cell(self, info) -> None:
        """Start a cell: remember its source, nothing recorded or handled yet."""
        self.cell, self.pending, self.handled = info.raw_cell or "", [], None

    def post_run_cell(self, result) -> None:
        """Name the cell's missing names after it (its number is known now, in every IPython), and end
        a cell whose error was reported in one line as done, so a "Run All" goes on."""
        if result is None:
            return
        first = next((s.strip() for s in self.cell.splitlines() if s.strip() and not s.lstrip().startswith("#")), "")
        first = first if len(first) <= 60 else first[:57] + "…"
        where = f"cell [{result.execution_count}]" + (f" (`{first}`)" if first else "")
        self.missing.update(dict.fromkeys(self.pending, where))
        self.missing = {n: w for n, w in self.missing.items() if n not in self.shell.user_ns}
        if self.handled is not None and result.error_in_exec is self.handled:
            result.error_in_exec = None
        self.pending, self.handled = [], None

    def record(self, names: list[str]) -> None:
        """Remember ``names`` as what the running cell would have bound."""
        self.pending += names

    def source_names(self) -> list[str]:
        """The names the running cell binds, read from its transformed source."""
        try:
            return bound_names(self.shell.transform_cell(self.cell))
        except Exception:  # a cell IPython cannot transform binds nothing we can tell
            return []

    def handle(self, shell, etype, value, tb, tb_offset=None):
        """IPython's custom exception handler: one line for a GPU error or a name it left undefined,
        IPython's own traceback for anything else."""
        name = getattr(value, "name", None) if isinstance(value, NameError) else None
        if needs_gpu(value):
            names = self.source_names()
            defines = f" and defines {', '.join(names[:6])}" + ("…" if len(names) > 6 else "") if names else ""
            skipped(names, f"on a GPU this cell runs CUDA code{defines}")  # records into _active, this tracker
        elif name in self.missing and name not in shell.user_ns:
            names = self.source_names()
            origin = self.missing[name]
            line = f"{PREFIX}: `{name}` comes from {origin}, which needs one, so this cell cannot run either. {HOW}"
            print(line)
            self.record(names)
        else:
            shell.showtraceback((etype, value, tb), tb_offset=tb_offset, running_compiled_code=True)  # as run_code does
            return None
        self.handled = value
        return None


def install(shell) -> Tracker:
    """Give ``shell`` the handlers (``%load_ext jitlab`` calls this); returns the :class:`Tracker`."""
    global _active
    if _active is not None and _active.shell is shell:
        return _active
    tracker = Tracker(shell)
    shell.set_custom_exc((Exception,), tracker.handle)
    shell.events.register("pre_run_cell", tracker.pre_run_cell)
    shell.events.register("post_run_cell", tracker.post_run_cell)
    _active = tracker
    return tracker
