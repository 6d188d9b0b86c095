"""The CPU emulator held to a corpus of course-style kernels (tests/fixtures/emulator/corpus/).

Each ``.cu`` there opens with its verdict, ``// corpus: correct.`` or ``// corpus: bug CLASS at line N.``,
then one ``// launch:`` line per launch (the call, evaluated with the helpers below, and its grid/block)
and an optional ``// expect:`` over the last launch's arguments ``a``. A correct kernel must PASS under
``emulator_run.checking()`` (what ``jitlab.check(..., device="cpu")`` runs) and compute what it claims, and
run in a plain call; a bug must be a :class:`jitlab.LaunchError` naming its class and ``file:line``, under
checking() and, for the bugs a plain run reports too, in a plain call. Nothing may take this process down.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import torch

import jitlab
from jitlab.errors import LaunchError
from jitlab.jit import emulator_run
from jitlab.jit.engines import emulator
from jitlab.jit.parse import SourceFile

CORPUS = Path(__file__).parent / "fixtures" / "emulator" / "corpus"
_VERDICT = re.compile(r"^// corpus: (?:(?P<ok>correct)|bug (?P<cls>[\w-]+) at line (?P<line>\d+))\.")
_LAUNCH = re.compile(r"^// launch: (?P<fn>\w+)\((?P<args>.*?)\)(?P<cfg>(?:\s+\w+=(?:\([^)]*\)|\S+))*)\s*$")
_SETTING = re.compile(r"(\w+)=(\([^)]*\)|\S+)")
#: What each bug class's message says (the test's contract with the emulator's words).
CLASSES = {
    "race": r"\brace\b", "uninitialised": r"uninitiali[sz]ed", "barrier": r"__syncthreads",
    "bounds": r"out[- ]of[- ]bounds", "shared_mem": r"shared_mem", "stack": r"stack",
    "timeout": r"time limit", "warp-mask": r"\bmask\b", "deadlock": r"wait for each other",
    "assert": r"assertion", "bad-address": r"bad address|null",
}
#: Bugs only the checked mode looks for (it records every shared and output access).
CHECK_ONLY = {"race", "uninitialised"}


def _helpers() -> dict:
    g = torch.Generator().manual_seed(0)
    return {
        "torch": torch,
        "zeros": lambda n: torch.zeros(n), "ones": lambda n: torch.ones(n),
        "randn": lambda n: torch.randn(n, generator=g), "arange": lambda n: torch.arange(n, dtype=torch.float32),
        "full": lambda n, v: torch.full((n,), v),
        "izeros": lambda n: torch.zeros(n, dtype=torch.int32), "iones": lambda n: torch.ones(n, dtype=torch.int32),
        "iarange": lambda n: torch.arange(n, dtype=torch.int32),
        "uzeros": lambda n: torch.zeros(n, dtype=torch.uint32), "lzeros": lambda n: torch.zeros(n, dtype=torch.int64),
        "special": lambda: torch.tensor([1.0, float("nan"), float("inf"), -2.0]),
        "big_unsigned": lambda: torch.tensor([0x80000000 + i for i in range(32)], dtype=torch.uint32),
    }


def parse(path: Path) -> dict:
    """A fixture's header: verdict, class and line of a bug, its launches and what the last must compute."""
    lines = path.read_text().splitlines()
    m = _VERDICT.match(lines[0])
    assert m, f"{path.name}: the first line says `// corpus: correct.` or `// corpus: bug CLASS at line N.`"
    launches = [_LAUNCH.match(line) for line in lines if line.startswith("// launch:")]
    assert launches and all(launches), f"{path.name}: `// launch: kernel(args) grid=G block=B`"
    expect = next((line[len("// expect: "):] for line in lines if line.startswith("// expect: ")), None)
    return {"ok": bool(m["ok"]), "cls": m["cls"], "line": int(m["line"] or 0), "launches": launches, "expect": expect}


def run_all(module, spec: dict) -> list:
    """Make every launch of the spec with fresh arguments; the last launch's arguments."""
    names = _helpers()
    args: list = []
    for m in spec["launches"]:
        args = list(eval(f"({m['args']},)", names))  # the fixtures are this repository's own files
        cfg = {k: eval(v, names) for k, v in _SETTING.findall(m["cfg"])}
        getattr(module, m["fn"])(*args, **cfg)
    return args


FILES = sorted(CORPUS.glob("*.cu"))


def test_the_corpus_has_sixty_kernels_correct_and_buggy():
    """The corpus holds at least 60 kernels, at least 25 correct and 25 buggy, every header readable."""
    specs = [parse(p) for p in FILES]
    assert len(specs) >= 60
    assert sum(s["ok"] for s in specs) >= 25 and sum(not s["ok"] for s in specs) >= 25
    assert all(s["ok"] or s["cls"] in CLASSES for s in specs)


@pytest.fixture
def emulated(use_shared_cache, monkeypatch):
    """Loads a corpus file for the emulator, with a 3 s time limit per launch."""
    monkeypatch.setenv("JITLAB_EMULATOR_TIMEOUT", "3")
    return lambda path: jitlab.load(path, device="cpu")


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_corpus_kernel(emulated, path, monkeypatch):
    """A correct kernel PASSes checking() and computes what it claims, plain too (through its lock-step twin where it
    has one: every twin written for the file compiled); a bug is named with its class at its line."""
    spec = parse(path)
    if spec["cls"] == "timeout":  # it never ends: each launch spins until the limit, which 1 s shows as well as 3 s
        monkeypatch.setenv("JITLAB_EMULATOR_TIMEOUT", "1")
    module = emulated(path)
    written = emulator.translated(SourceFile(path=path, text=path.read_text(), language="cuda"))[1]
    symbols = subprocess.run(["nm", "-C", str(module.build.artifact)], capture_output=True, text=True).stdout
    assert set(re.findall(r"jitlab_steps_(\w+)\(", symbols)) == written, "a twin the compiler refused"
    if spec["ok"]:
        with emulator_run.checking():
            a = run_all(module, spec)
        if spec["expect"]:
            assert eval(spec["expect"], {**_helpers(), "a": a}), f"{path.name}: {spec['expect']}"
        a = run_all(module, spec)  # and a plain call computes it too (unless launches carry __device__ state on)
        if spec["expect"] and not re.search(r"^__device__\s+[\w\s]+?\w+\s*(=|;|\[)", path.read_text(), re.M):
            assert eval(spec["expect"], {**_helpers(), "a": a}), f"{path.name}, plain: {spec['expect']}"
        return
    modes = ["checked"] if spec["cls"] in CHECK_ONLY else ["checked", "plain"]
    for mode in modes:
        with emulator_run.checking(mode == "checked"), pytest.raises(LaunchError) as e:
            run_all(module, spec)
        message = str(e.value)
        assert re.search(CLASSES[spec["cls"]], message, re.I), f"{mode}: not named a {spec['cls']}: {message}"
        assert f"{path.name}:{spec['line']}" in message, f"{mode}: not at line {spec['line']}: {message}"
