"""Torch's header sets made in the background when a notebook loads jitlab (jit/prepare.py).

Most tests use a stand-in compiler (a fake ``pch.run_tool`` that writes a small file after a short sleep and
counts its runs): they are about the mechanism, the lock and the messages, not GCC. One slow test makes
torch's real sets in the background and builds a torch-style snippet meanwhile.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import end_shell

from jitlab.errors import ToolchainError
from jitlab.jit import builder, prepare, processes, toolchain
from jitlab.jit.engines import pch
from jitlab.jit.flags import Options, default_host_flags, object_flags

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def fresh(tmp_path, monkeypatch):
    """A process that has started nothing yet, its own pch folder, and the switch on."""
    monkeypatch.setenv("JITLAB_PCH_DIR", str(tmp_path / "pch"))
    monkeypatch.setenv("JITLAB_PREPARE_HEADERS", "1")
    monkeypatch.setattr(prepare, "_started", False)
    monkeypatch.setattr(prepare, "_threads", [])
    monkeypatch.setattr(prepare, "_ahead", set())
    monkeypatch.setattr(pch, "_kept", {})
    monkeypatch.setattr(pch, "_refused", {})
    yield
    prepare.wait(30)


@pytest.fixture
def compiler(fresh, monkeypatch):
    """A stand-in for the compiler that makes a set: 0.3 s, then a 4 kB file; ``runs`` names each entry it
    made (by header set), ``fail`` the header sets it fails on. GCC's sets: no clang is asked to read a stand-in."""
    monkeypatch.setenv("JITLAB_CLANG", "0")
    runs: list[str] = []
    fail: set[str] = set()
    lock = threading.Lock()

    def run(cmd, folder, what):
        headers = folder.name.split("-")[-2]  # <kind>-<headers>-<key>
        with lock:
            runs.append(headers)
        time.sleep(0.3)
        if headers in fail:
            raise ToolchainError(f"jitlab: {what} failed (log: {folder / 'build.log'}):\nfake: {headers} refused")
        Path(cmd[cmd.index("-o") + 1]).write_bytes(b"\0" * 4096)
        return ""

    monkeypatch.setattr(pch, "run_tool", run)
    return runs, fail


def test_the_sets_made_are_the_ones_a_plain_build_starts_on(fresh):
    """The background makes, with a plain jitlab.load's flags, the set of every torch host unit of a CUDA
    and a C++ snippet (names compared: same text, flags and toolchain), and the binder their entries need."""
    made = {pch._describe("torch", *w)[2] for w in prepare.wanted() if w is not prepare.BINDER}
    assert prepare.BINDER in prepare.wanted()
    for snippet in ("square_matrix.cu", "square_matrix_cpu.cpp"):
        opts = Options(arch=["sm_90"])
        plan, archs, _ = builder.prepare([ROOT / "kernels" / snippet], opts)
        assert plan.entries
        flags = object_flags(plan, archs, opts)
        cuda = any(u.compiler == "nvcc" for u in plan.units)
        for unit in (u for u in plan.units if u.compiler == "cxx" and u.torch):
            assert pch._describe("torch", flags, cuda, unit.headers)[2] in made, (snippet, unit.name)


def test_start_makes_each_set_once_and_says_one_line(compiler, capsys):
    """Started twice (the first cell, then %load_ext), one line is said and each set is made once."""
    runs, _ = compiler
    prepare.start()
    prepare.start()
    prepare.wait(30)
    assert capsys.readouterr().out == prepare.LINE + "\n"
    assert sorted(runs) == sorted(h for _, _, h in prepare.wanted())


@pytest.mark.parametrize("cuda", [True, False])
def test_a_batch_starts_the_host_set_and_binder_its_builds_wait_for(compiler, capsys, cuda, monkeypatch):
    """``jitlab check`` starts, silently and before its own first work, the set a plain build of its kind starts
    on and the binder; called again with them made, it makes nothing."""
    runs, _ = compiler
    monkeypatch.setattr(toolchain, "nvcc_path", lambda: "/usr/local/cuda/bin/nvcc")  # a CUDA batch needs nvcc
    prepare.ahead(cuda)
    prepare.wait(30)
    assert sorted(runs) == ["binder", "host"] and capsys.readouterr().out == ""
    assert pch.is_made(default_host_flags(cuda), cuda, "host")
    prepare.ahead(cuda)
    prepare.wait(30)
    assert sorted(runs) == ["binder", "host"]


def test_a_batch_started_twice_while_its_sets_are_made_makes_each_once(compiler, monkeypatch):
    """``jitlab check`` starts the sets before importing torch and its grading asks again while they are being
    made (the stand-in compiler takes 0.3 s): each set is made once, not waited for by a second thread."""
    runs, _ = compiler
    monkeypatch.setattr(toolchain, "nvcc_path", lambda: "/usr/local/cuda/bin/nvcc")
    prepare.ahead(True)
    prepare.ahead(True)
    assert len(prepare.threads()) == 2
    prepare.wait(30)
    assert sorted(runs) == ["binder", "host"]


def test_load_ext_starts_the_background_once(compiler, capsys):
    """%load_ext jitlab starts the sets in the background and says one line; loading again starts nothing."""
    from IPython.core.interactiveshell import InteractiveShell

    from jitlab.notebook import magic

    shell = InteractiveShell.instance()
    try:
        shell.run_line_magic("load_ext", "jitlab")
        assert prepare.threads(), "no background thread"
        magic.load_ipython_extension(shell)
        prepare.wait(30)
    finally:
        end_shell()
    assert capsys.readouterr().out.count("jitlab: preparing torch's headers") == 1
    assert len(compiler[0]) == len(prepare.wanted())


def test_a_build_meanwhile_waits_for_the_set_and_makes_nothing_twice(compiler, capsys):
    """A build that needs a set the background is making waits on its lock, says so, and gets the same set."""
    runs, _ = compiler
    prepare.start()
    flags, cuda, headers = prepare.wanted()[0]
    deadline = time.monotonic() + 10
    while headers not in runs and time.monotonic() < deadline:  # the background compiles it, under its lock
        time.sleep(0.01)
    header = pch.precompiled_header(flags, cuda, headers)
    prepare.wait(30)
    assert header.with_suffix(".h.gch").is_file()
    assert sorted(runs) == sorted(h for _, _, h in prepare.wanted())  # each once: none by the build
    assert "started in the background" in capsys.readouterr().out


def test_nothing_starts_and_nothing_is_said_when_the_sets_are_made(compiler, capsys):
    """With every set made, start() says nothing and starts no thread."""
    runs, _ = compiler
    for w in prepare.wanted():
        prepare.make(w)
    runs.clear()
    capsys.readouterr()
    prepare.start()
    assert prepare.threads() == [] and runs == [] and capsys.readouterr().out == ""


def test_the_switch_turns_it_off(compiler, monkeypatch, capsys):
    """JITLAB_PREPARE_HEADERS=0: nothing starts, nothing is said."""
    monkeypatch.setenv("JITLAB_PREPARE_HEADERS", "0")
    prepare.start()
    assert prepare.threads() == [] and compiler[0] == [] and capsys.readouterr().out == ""


def test_a_failure_in_the_background_surfaces_once_in_the_build_that_needs_the_set(compiler, capsys):
    """The background's error is said nowhere; the first build that needs the set raises it (without
    compiling again), and the next build makes the set."""
    runs, fail = compiler
    flags, cuda, headers = prepare.wanted()[0]
    fail.add(headers)
    prepare.start()
    prepare.wait(30)
    assert capsys.readouterr().out == prepare.LINE + "\n"
    n = len(runs)
    with pytest.raises(ToolchainError, match=f"fake: {headers} refused") as e:
        pch.precompiled_header(flags, cuda, headers)
    log = Path(str(e.value).split("(log: ", 1)[1].split(")", 1)[0])
    assert f"fake: {headers} refused" in log.read_text()  # the log the error names is there
    assert len(runs) == n and "failed; the next build tries again" in capsys.readouterr().out
    fail.clear()
    assert pch.precompiled_header(flags, cuda, headers).is_file()
    assert len(runs) == n + 1


def test_a_script_that_prints_the_environment_starts_nothing(compiler, capsys):
    """The lessons' first cell starts the sets only in a notebook: a script's print_environment() does not."""
    from jitlab.notebook import lessons

    lessons.print_environment()
    assert prepare.threads() == [] and "preparing torch's headers" not in capsys.readouterr().out


@pytest.mark.slow
def test_a_torch_style_build_waits_for_the_real_sets_made_in_the_background(fresh, tmp_path, monkeypatch):
    """torch's real CUDA host set and the binder made in the background; a compile-only torch-style build started
    meanwhile uses them and runs the compiler for neither (each made once)."""
    monkeypatch.setenv("JITLAB_CACHE_DIR", str(tmp_path / "cache"))
    every = prepare.wanted
    monkeypatch.setattr(prepare, "wanted", lambda: [w for w in every() if w[1] or w is prepare.BINDER])
    runs = []
    real = pch.run_tool
    monkeypatch.setattr(pch, "run_tool", lambda cmd, folder, what: runs.append(folder.name) or real(cmd, folder, what))
    prepare.start()
    time.sleep(1)
    b = builder.build([ROOT / "kernels" / "square_matrix.cu"], Options(compile_only=True, arch=["sm_90"]))
    prepare.wait()
    assert {u["headers"] for u in b.manifest.units if u["compiler"] == "cxx"} == {"host"}
    assert sorted(n.split("-")[-2] for n in runs) == ["binder", "host"]



def test_jitlab_check_starts_the_header_sets_before_importing_torch(tmp_path):
    """``jitlab check`` on KernelBench pairs asks for torch's header sets before anything imports torch (3-4 s
    of a cold batch's critical path): in a fresh interpreter, ``import jitlab`` loads no torch, and the first
    ``prepare.ahead`` call comes with torch not loaded yet."""
    problem = tmp_path / "problem.py"
    problem.write_text("import torch\nclass Model(torch.nn.Module):\n    pass\ndef get_inputs():\n    return []\n")
    (tmp_path / "solution.py").write_text("class ModelNew:\n    pass\n")
    code = f"""
import sys
import jitlab
from jitlab.jit import prepare
assert "torch" not in sys.modules, "import jitlab imported torch"
def ahead(cuda):
    print("ahead", cuda, "torch" in sys.modules)
    raise SystemExit(0)
prepare.ahead = ahead
from jitlab import cli
cli.main(["check", {str(problem)!r}, {str(tmp_path / "solution.py")!r}])
print("not called")
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0 and r.stdout.split() == ["ahead", "True", "False"], r.stdout + r.stderr


@pytest.mark.parametrize("slow_start", [False, True], ids=["start", "slow_start"])
def test_background_compilers_end_with_what_they_started(fresh, tmp_path, monkeypatch, slow_start):
    """At exit the background compilers end with their whole process group: a ``g++`` killed alone leaves its
    ``cc1plus`` compiling (a stand-in: a shell that starts a child and waits for it). Also when the exit comes
    while the starting thread has not yet listed its compiler (``slow_start``: a pause after the start, as a busy
    machine's scheduler can make; the compiler used to survive it)."""
    if slow_start:
        real = processes.start
        monkeypatch.setattr(processes, "start", lambda *a, **k: (real(*a, **k), time.sleep(0.5))[0])
    child = tmp_path / "child.pid"
    script = f"sleep 300 & echo $! > {child}; wait"
    t = threading.Thread(target=pch.in_background, args=(pch.run_tool, ["sh", "-c", script], tmp_path, "a set"))
    t.start()
    deadline = time.monotonic() + 10
    while not (child.exists() and child.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.02)
    pid = int(child.read_text())
    pch.stop_background()
    t.join(10)
    deadline = time.monotonic() + 5
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not t.is_alive() and not _alive(pid)


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, killed and not yet reaped, counts as ended)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()[0] != "Z"
    except OSError:
        return False
