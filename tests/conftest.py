"""Shared fixtures: a fresh build cache per test, a writer for snippet files, and the `jitlab` command
run in process."""

from __future__ import annotations

import os
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest
import torch

pytest_plugins = ["run_progress"]  # a line now and then: tests done, time spent, about how long is left

ROOT = Path(__file__).resolve().parent.parent
KERNELS = ROOT / "kernels"
# A shell that loads jitlab (the `ip` fixture, the lessons run by nbclient) would start precompiling torch's
# headers in the background, behind every later test: tests that need the sets make them where they do.
os.environ.setdefault("JITLAB_PREPARE_HEADERS", "0")


def run_dir(tmp_path_factory, name: str) -> Path:
    """A folder for the whole test run: with pytest-xdist (`-n`), one that every worker shares.

    jitlab's builds lock what they make (flock per cache entry), so workers that need the same build
    wait for one another instead of compiling it twice.
    """
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # pytest-N/, the folder above each worker's popen-gwK/
    folder = base / name
    folder.mkdir(exist_ok=True)
    return folder


def worker_dir(tmp_path_factory, name: str) -> Path:
    """A folder of the run's (:func:`run_dir`) that only this worker uses: for a snippet that one test after
    another edits and builds in the shared cache, so that each test's first build is the one the worker's
    previous test made (a copy at a path of its own would compile again: #line directives name the file)."""
    folder = run_dir(tmp_path_factory, name) / os.environ.get("PYTEST_XDIST_WORKER", "main")
    folder.mkdir(exist_ok=True)
    return folder


def run_file(folder: Path, name: str, text: str) -> Path:
    """``folder / name`` holding ``text``, for a snippet that tests of every worker build unchanged (one build key:
    the same text at the same path). Written once, whole (a temporary file, then ``os.replace``), never
    half-written for a worker that reads it meanwhile."""
    path = folder / name
    if not path.is_file() or path.read_text() != text:
        folder.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{name}.{os.getpid()}")
        tmp.write_text(text)
        os.replace(tmp, path)
    return path


@pytest.fixture(scope="session", autouse=True)
def shared_pch(tmp_path_factory):
    """One folder of precompiled torch headers for the whole run (a minute to make on 2 cores)."""
    if "JITLAB_PCH_DIR" not in os.environ:
        os.environ["JITLAB_PCH_DIR"] = str(run_dir(tmp_path_factory, "pch"))
    return os.environ["JITLAB_PCH_DIR"]


def pytest_collection_modifyitems(config, items):
    """GPU tests need a GPU: without one they are deselected, never counted as passed. The slow tests
    (torch headers, browsers) go first, so that parallel workers (`-n`) start the long ones early."""
    items.sort(key=lambda i: not any(m in i.keywords for m in ("slow", "browser")))  # stable
    if torch.cuda.is_available():
        return
    keep = [i for i in items if "gpu" not in i.keywords]
    dropped = [i for i in items if "gpu" in i.keywords]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """A fresh, empty JITLAB_CACHE_DIR for this test."""
    d = tmp_path / "cache"
    monkeypatch.setenv("JITLAB_CACHE_DIR", str(d))
    return d


@pytest.fixture
def ip(cache, tmp_path, monkeypatch):
    """An IPython shell in a fresh folder with `%load_ext jitlab` (the %%cuda / %%cpp magics)."""
    from IPython.core.interactiveshell import InteractiveShell

    monkeypatch.chdir(tmp_path)
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "jitlab")
    yield shell
    end_shell()


def end_shell() -> None:
    """End the test's IPython shell (``InteractiveShell.instance()``) now: its history closed, its temporary files
    removed, and no exit hook left behind. Each shell registers one that resets it at exit, a full
    ``gc.collect()`` per shell over a heap holding torch: ~10 s at a pytest worker's exit for its ~100 shells."""
    import atexit

    from IPython.core.interactiveshell import InteractiveShell

    if InteractiveShell.initialized():
        shell = InteractiveShell.instance()
        atexit.unregister(shell.atexit_operations)
        if shell.history_manager is not None:
            shell.history_manager.end_session()
            shell.history_manager.close()
            shell.history_manager = None
        for f in shell.tempfiles:
            f.unlink(missing_ok=True)
        for d in shell.tempdirs:
            shutil.rmtree(d, ignore_errors=True)
    InteractiveShell.clear_instance()


@pytest.fixture(scope="session")
def shared_cache(tmp_path_factory) -> Path:
    """A cache shared by the tests that do not test the cache (one per run, all workers)."""
    return run_dir(tmp_path_factory, "shared_cache")


@pytest.fixture
def use_shared_cache(shared_cache, monkeypatch) -> Path:
    monkeypatch.setenv("JITLAB_CACHE_DIR", str(shared_cache))
    return shared_cache


@pytest.fixture
def jitlab_cli(monkeypatch, capfd):
    """jitlab_cli("build", ..., cwd=folder) → what the `jitlab` command exits with and prints, as a
    CompletedProcess. It runs ``jitlab.cli.main`` in this process (a new Python process spends ~2 s of
    CPU importing torch); test_cli.py runs ``python -m jitlab`` as a process of its own too."""
    from jitlab import cli

    def _run(*args, cwd: Path = ROOT) -> subprocess.CompletedProcess:
        monkeypatch.chdir(cwd)
        capfd.readouterr()
        argv = [str(a) for a in args]
        try:
            code = cli.main(argv)
        except SystemExit as e:  # argparse's usage errors
            code = e.code
        out, err = capfd.readouterr()
        return subprocess.CompletedProcess(["jitlab", *argv], code, out, err)

    return _run


@pytest.fixture
def write(tmp_path):
    """write("name.cpp", source) → Path: a snippet file in this test's folder (dedented)."""

    def _write(name: str, text: str) -> Path:
        p = tmp_path / "snippets" / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text).lstrip("\n"))
        return p

    return _write


@pytest.fixture
def kernel_copy(tmp_path):
    """kernel_copy("add2_seed") → a copy of kernels/add2_seed in this test's folder."""

    def _copy(name: str) -> Path:
        src = KERNELS / name
        dst = tmp_path / "kernels" / name
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            shutil.copytree(src, dst)
        else:
            shutil.copy(src, dst)
        return dst

    return _copy


class FakeNvml:
    """libnvidia-ml's calls jitlab makes (``jit/nvml.py``), answering for two GPUs: 80 and 24 GB, compute
    capability 9.0 each (``caps`` to change); ``shut`` once NVML is shut down again."""

    def __init__(self, sizes=(80 * 10**9, 24 * 10**9), caps=((9, 0), (9, 0))):
        self.sizes, self.caps, self.shut = list(sizes), list(caps), False

    def nvmlInit_v2(self):
        return 0

    def nvmlDeviceGetCount_v2(self, count):
        count._obj.value = len(self.sizes)
        return 0

    def nvmlDeviceGetHandleByIndex_v2(self, index, handle):
        handle._obj.value = index.value + 1
        return 0

    def nvmlDeviceGetMemoryInfo(self, handle, memory):
        memory._obj.total = self.sizes[handle.value - 1]
        return 0

    def nvmlDeviceGetCudaComputeCapability(self, handle, major, minor):
        major._obj.value, minor._obj.value = self.caps[handle.value - 1]
        return 0

    def nvmlShutdown(self):
        self.shut = True
        return 0
