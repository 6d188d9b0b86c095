"""The lesson notebooks: the environment their first cell prints, and running them headless.

``run_notebook`` executes a notebook the way a learner would, top to bottom, with nbclient: in a
temporary working folder holding a copy of ``kernels/`` and the notebook (so the run never touches
your ``kernels/`` files), with this Python as the kernel. Cells that need a GPU carry the cell tag
``gpu``; without a GPU they run too, and each says in one line that it needs one
(:mod:`jitlab.notebook.nogpu`), as it does for a learner. A failing cell raises
:class:`NotebookError` naming the cell and its error. From a shell::

    python -m jitlab.notebook.lessons notebooks/*.ipynb
    python -m jitlab.notebook.lessons --no-gpu notebooks/01_vector_add.ipynb   # gpu cells left out
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from jitlab import config
from jitlab.errors import JitlabError
from jitlab.jit import prepare
from jitlab.notebook import nogpu
from jitlab.worker import proc

#: The cell tag of cells that need a CUDA GPU.
GPU_TAG = "gpu"
#: Seconds one cell may run (a torch-style build on a 2-core Colab machine takes a minute or two).
CELL_TIMEOUT = 900


# ---- the environment the first cell prints -------------------------------------------------------
def environment() -> dict[str, str]:
    """What a kernel build here depends on: GPU and arch, torch and its CUDA, nvcc, ninja, compiler."""
    import torch

    from jitlab.jit import ninja_tool, toolchain

    env = {
        "where": "Google Colab" if "google.colab" in sys.modules else "local",
        "python": f"{sys.version.split()[0]} ({sys.executable})",
        "torch": f"{torch.__version__}, " + (f"built with CUDA {torch.version.cuda}" if torch.version.cuda
                                             else "a CPU build (CUDA kernels can be compiled, not run)"),
    }
    if toolchain.gpu_available():
        p = torch.cuda.get_device_properties(0)
        env["GPU"] = (f"{p.name}, arch sm_{p.major}{p.minor}, {p.multi_processor_count} SMs, "
                      f"{p.total_memory / 2**30:.1f} GiB")
    else:
        env["GPU"] = "none: cells that need one say so in one line; compile-only builds still work"
    nvcc = toolchain.nvcc_path()
    env["nvcc"] = f"CUDA {toolchain.nvcc_version()} ({nvcc})" if nvcc else "not found: CUDA kernels cannot be built"
    if nvcc and torch.version.cuda:
        same = (toolchain.nvcc_version() or "").split(".")[0] == torch.version.cuda.split(".")[0]
        env["nvcc vs torch"] = "same CUDA major version: ok" if same else (
            f"MISMATCH: nvcc is CUDA {toolchain.nvcc_version()}, torch is built with {torch.version.cuda}")
    env["ninja"] = ninja_tool.ninja_path() or ("not found: `pip install ninja` (kernel-only snippets with host code and "
                                              "torch's own cpp_extension need it; NVRTC and split torch-style builds do not)")
    env["C++ compiler"] = toolchain.cxx_path() or "not found"
    env["first build"] = first_build_note()
    env["jitlab"] = f"{config.VERSION} ({Path(__file__).resolve().parents[1]})"
    env["working folder"] = str(Path.cwd())
    env["build cache"] = str(config.cache_dir())
    return env


def first_build_note() -> str:
    """How long the first torch-style build takes here and why, while torch's headers are not yet
    precompiled in this cache (afterwards: that they are). Figures: a 2-core H100 host, 47 s."""
    made = any(config.pch_dir().glob("*/jitlab.json")) if config.pch_dir().is_dir() else False
    if made:
        return f"torch's headers are precompiled ({config.pch_dir()}): torch-style builds take seconds"
    cores = config.cores()
    wait = "about a minute" if cores <= 2 else "about half a minute"
    return (f"the first torch-style build takes {wait} on {cores} cores: it precompiles torch's headers once "
            f"(about 1 GB, kept in {config.pch_dir()}); later ones take seconds, and kernel-only snippets "
            f"under a second (NVRTC)")


def print_environment() -> None:
    """Print :func:`environment`, one ``name: value`` line each; in a notebook (the lessons' first cell),
    start precompiling torch's headers in the background (:func:`jitlab.jit.prepare.start`)."""
    env = environment()
    width = max(map(len, env))
    for k, v in env.items():
        print(f"{k + ':':<{width + 2}}{v}")
    if _in_notebook():
        prepare.start()


def _in_notebook() -> bool:
    """Whether an IPython shell runs this process (a notebook's kernel), not a script."""
    ipython = sys.modules.get("IPython")
    return ipython is not None and getattr(ipython, "get_ipython", lambda: None)() is not None


# ---- running a notebook ----------------------------------------------------------------------------
class NotebookError(JitlabError):
    """A notebook cell that raised: which notebook and cell, its source, and the error."""


@dataclass
class NotebookRun:
    """A finished run.

    Attributes:
        path: The notebook.
        workdir: The folder it ran in (its copy of ``kernels/`` and the executed notebook).
        ran: Code cells executed.
        skipped: Code cells left out (tagged ``gpu``, with ``gpu=False``).
        seconds: Wall time.
        notebook: The executed notebook (nbformat), outputs included.
    """

    path: Path
    workdir: Path
    ran: int
    skipped: int
    seconds: float
    notebook: object

    @property
    def needed_gpu(self) -> list[int]:
        """Indices of the cells that said, in one line, that they need a GPU."""
        return [i for i, c in enumerate(self.notebook.cells) if c.cell_type == "code" and
                any(line.startswith(nogpu.PREFIX) for line in cell_text(c).splitlines())]

    def __str__(self) -> str:
        skipped = f", {self.skipped} GPU cells left out" if self.skipped else ""
        needed = f", {len(self.needed_gpu)} said they need a GPU" if self.needed_gpu else ""
        return f"{self.path.name}: ran {self.ran} code cells in {self.seconds:.0f} s{skipped}{needed}"


#: The MIME type of an output that shows an ipywidgets widget.
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"


def cell_text(cell) -> str:
    """What a code cell shows as text, as a notebook front end shows it.

    Streams, ``text/plain`` results, and error names and values, with two front-end rules applied:
    a carriage return overwrites its line (a terminal-style progress line leaves its last state), and an
    output that is a widget view is the widget, not its ``text/plain`` stand-in (a progress widget that
    closes leaves nothing behind).
    """
    out = []
    for o in cell.get("outputs", []):
        if o.get("output_type") == "error":
            out.append(f"{o.get('ename')}: {o.get('evalue')}\n" + "\n".join(o.get("traceback", [])))
        elif WIDGET_MIME not in o.get("data", {}):
            out.append(o.get("text", "") + str(o.get("data", {}).get("text/plain", "")))
    return _overwrite_returns("".join(out))


def _overwrite_returns(text: str) -> str:
    """Each line as a terminal leaves it: text after a carriage return overwrites the line from its start."""
    lines = []
    for line in text.replace("\r\n", "\n").split("\n"):
        shown = ""
        for part in line.split("\r"):
            shown = part + shown[len(part):]
        lines.append(shown)
    return "\n".join(lines)


def is_gpu_cell(cell) -> bool:
    """Whether a cell carries the ``gpu`` tag."""
    return GPU_TAG in cell.get("metadata", {}).get("tags", [])


def without_gpu_cells(nb):
    """A copy of ``nb`` without its ``gpu``-tagged cells."""
    import copy

    out = copy.deepcopy(nb)
    out.cells = [c for c in out.cells if not is_gpu_cell(c)]
    return out


def kernel_name(folder: Path) -> tuple[str, object]:
    """A kernelspec that runs this Python: the installed ``python3`` one if it does, else one written to ``folder``.

    Returns:
        The kernel name and the ``KernelSpecManager`` that finds it.
    """
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    ksm = KernelSpecManager()
    try:
        argv0 = ksm.get_kernel_spec("python3").argv[0]
    except NoSuchKernel:
        argv0 = None
    # jupyter_client runs a spec's "python"/"python3" as sys.executable.
    if argv0 in ("python", f"python{sys.version_info[0]}", f"python{sys.version_info[0]}.{sys.version_info[1]}") or (
            argv0 and Path(argv0).resolve() == Path(sys.executable).resolve()):
        return "python3", ksm
    spec = folder / "kernels" / "jitlab-python"
    spec.mkdir(parents=True, exist_ok=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python (jitlab)", "language": "python"}))
    return "jitlab-python", KernelSpecManager(kernel_dirs=[str(folder / "kernels")])


def prepare_workdir(path: Path, workdir: Path, kernels: Path) -> Path:
    """Copy ``kernels/`` and the notebook into ``workdir`` (as ``kernels/`` and ``notebooks/NAME``)."""
    shutil.copytree(kernels, workdir / "kernels", ignore=shutil.ignore_patterns(".history", "__pycache__"),
                    dirs_exist_ok=True)
    (workdir / "notebooks").mkdir(parents=True, exist_ok=True)
    target = workdir / "notebooks" / path.name
    shutil.copy(path, target)
    return target


def _failure(nb, err) -> NotebookError:
    """The cell that raised (nbclient stops there: the last cell with an execution count) and its error."""
    ran = [(i, c) for i, c in enumerate(nb.cells) if c.cell_type == "code" and c.get("execution_count") is not None]
    i, cell = ran[-1] if ran else (None, None)
    where = f"cell {i} (id {cell.get('id', '?')})" if cell is not None else "a cell"
    head = "\n".join(f"    {line}" for line in (cell.source if cell is not None else "").splitlines()[:6])
    ename, evalue = getattr(err, "ename", type(err).__name__), getattr(err, "evalue", str(err))
    trace = re.sub(r"\x1b\[[0-9;]*m", "", str(err))  # no terminal colours in a message
    return NotebookError(f"{where} failed with {ename}: {str(evalue).strip()}\n{head}\n\n{trace}")


def run_notebook(path, workdir=None, gpu: bool = True, timeout: int = CELL_TIMEOUT,
                 kernels=None) -> NotebookRun:
    """Execute a lesson notebook top to bottom, in a throwaway copy of ``kernels/``.

    Args:
        path: The ``.ipynb`` file.
        workdir: An empty folder to run in; default: a new temporary folder (kept, for the outputs).
        gpu: Run the ``gpu``-tagged cells (default; without a GPU each prints the one line saying
            that it needs one); ``False`` leaves them out.
        timeout: Seconds each cell may take.
        kernels: The ``kernels/`` folder to copy; default: the one beside the notebook's folder,
            else jitlab's checkout's.

    Returns:
        A :class:`NotebookRun` with the executed notebook.

    Raises:
        NotebookError: A cell raised; the message names the cell, its source and the error.
    """
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

    path = Path(path).resolve()
    if kernels is None:
        beside = path.parent.parent / "kernels"
        kernels = beside if beside.is_dir() else config.SOURCE_ROOT / "kernels"
    workdir = Path(workdir) if workdir is not None else Path(tempfile.mkdtemp(prefix=f"jitlab-{path.stem}-"))
    target = prepare_workdir(path, workdir, Path(kernels))
    nb = nbformat.read(target, as_version=4)
    total = sum(c.cell_type == "code" for c in nb.cells)
    if not gpu:
        nb = without_gpu_cells(nb)
    ran = sum(c.cell_type == "code" for c in nb.cells)
    name, ksm = kernel_name(workdir / ".jupyter")
    env = proc.python_env()
    client = NotebookClient(nb, timeout=timeout, kernel_name=name, allow_errors=False,
                            resources={"metadata": {"path": str(target.parent)}})
    client.km = client.kernel_manager_class(kernel_name=name, kernel_spec_manager=ksm)
    t0 = time.perf_counter()
    try:
        client.execute(env=env)
    except (CellExecutionError, CellTimeoutError, DeadKernelError) as e:
        raise _failure(nb, e) from None
    finally:
        nbformat.write(nb, target)  # the executed copy, outputs included, for a look afterwards
    return NotebookRun(path, workdir, ran, total - ran, time.perf_counter() - t0, nb)


def main(argv=None) -> int:
    """``python -m jitlab.notebook.lessons NOTEBOOK...``: run each; print what ran and the first failure of each."""
    p = argparse.ArgumentParser(prog="python -m jitlab.notebook.lessons", description=__doc__.split("\n\n")[0])
    p.add_argument("notebooks", nargs="+", help=".ipynb files")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--gpu", dest="gpu", action="store_true", default=True,
                   help="run the gpu-tagged cells (the default; without a GPU each says so in one line)")
    g.add_argument("--no-gpu", dest="gpu", action="store_false", help="leave the gpu-tagged cells out")
    p.add_argument("--timeout", type=int, default=CELL_TIMEOUT, help="seconds per cell")
    args = p.parse_args(argv)
    failed = 0
    for nb in args.notebooks:
        try:
            print(run_notebook(nb, gpu=args.gpu, timeout=args.timeout), flush=True)
        except NotebookError as e:
            failed += 1
            print(f"{Path(nb).name}: FAILED: {e}", flush=True)
    print(f"{len(args.notebooks) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
