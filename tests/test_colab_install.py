"""Installing jitlab on Colab as it really is: pip's resolver against Colab's published package set.

A virtual environment of the Python closest to Colab's (3.13 where this machine has it) is given
every package of Colab's GPU image as installed: each pin of ``colab/constraints-2026-08.txt`` becomes
a ``.dist-info`` with its real requirements from PyPI (``colab/installed-2026-08.json``, written by
``scripts/colab-snapshot``; ``torch==2.11.0+cu128``'s are not on PyPI, so it is modelled with none,
which leaves every CUDA choice to jitlab's own requirements). Then pip resolves what the lessons'
first cell and the README's by-hand line run, ``--dry-run --report``: PyPI's metadata only, no
wheel downloaded. Needs PyPI (marker ``net``): without it the test fails saying so, never skips.
"""

from __future__ import annotations

import fcntl
import glob
import json
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.version import Version

from conftest import run_dir
from jitlab.jit import cache

ROOT = Path(__file__).resolve().parent.parent
INSTALLED = ROOT / "colab" / "installed-2026-08.json"

pytestmark = [pytest.mark.net, pytest.mark.slow]


def canonical(name: str) -> str:
    """A distribution name as pip compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def colab_python() -> str:
    """The interpreter nearest Colab's 3.13 that runs: pyenv's 3.13, ``python3.13`` on PATH, else this one."""
    candidates = [*sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.13*/bin/python3.13")), reverse=True),
                  shutil.which("python3.13"), sys.executable]
    for python in filter(None, candidates):
        if subprocess.run([python, "-c", "import venv"], capture_output=True).returncode == 0:
            return python
    return sys.executable


@pytest.fixture(scope="module")
def colab() -> dict:
    """Colab's packages: name → version, and name → requirements (from the snapshot)."""
    snapshot = json.loads(INSTALLED.read_text())
    packages = snapshot["packages"]
    return {"packages": {n: i["version"] for n, i in packages.items()},
            "requires": {n: i["requires_dist"] or [] for n, i in packages.items()}, "snapshot": snapshot}


def colab_venv(folder: Path) -> str:
    """A venv in ``folder`` holding Colab's packages as installed (metadata only); its python."""
    venv = folder / "venv"
    subprocess.run([colab_python(), "-m", "venv", str(venv)], check=True, capture_output=True)
    python = str(venv / "bin" / "python")
    purelib = Path(subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                  check=True, capture_output=True, text=True).stdout.strip())
    for name, info in json.loads(INSTALLED.read_text())["packages"].items():
        if name == "pip":  # the venv's own pip does the resolving
            continue
        dist = purelib / f"{name.replace('-', '_')}-{info['version']}.dist-info"
        dist.mkdir()
        lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {info['version']}"]
        lines += [f"Requires-Dist: {r}" for r in info["requires_dist"] or []]
        (dist / "METADATA").write_text("\n".join(lines) + "\n")
        (dist / "INSTALLER").write_text("colab-snapshot\n")
        (dist / "RECORD").write_text("")
    return python


def _resolve(python: str, spec: str, report: Path) -> dict:
    """pip's plan for ``pip install <spec>`` in that venv, without installing anything."""
    env = {**os.environ, "PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    env.pop("PIP_FIND_LINKS", None)
    proc = subprocess.run([python, "-m", "pip", "install", "--dry-run", "--quiet", "--report", str(report),
                           *spec.split()], capture_output=True,
                          text=True, env=env, cwd=ROOT, timeout=240)
    assert proc.returncode == 0, (f"pip could not resolve `pip install {spec}` against Colab's packages "
                                  f"(this test needs PyPI; is the network down?):\n{proc.stderr[-3000:]}")
    return json.loads(report.read_text())


@pytest.fixture(scope="module")
def plans(tmp_path_factory) -> dict:
    """pip's plans for the lessons' first cell (``-e .[cu12]``, torch being CUDA 12.8) and the README's
    by-hand install (``-e .``), resolved side by side once per test run (pytest-xdist workers share them)."""
    folder = run_dir(tmp_path_factory, "colab-install")
    saved = folder / "plans.json"
    with open(folder / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not saved.is_file():
            python = colab_venv(folder)
            specs = {"first cell": "-e .[cu12]", "by hand": "-e ."}
            with ThreadPoolExecutor(len(specs)) as pool:
                futures = {k: pool.submit(_resolve, python, s, folder / f"{i}.json") for i, (k, s) in enumerate(specs.items())}
                cache.write_json(saved, {k: f.result() for k, f in futures.items()})
    return json.loads(saved.read_text())


def _new(plan: dict) -> dict[str, str]:
    return {canonical(i["metadata"]["name"]): i["metadata"]["version"] for i in plan["install"]
            if canonical(i["metadata"]["name"]) != "jitlab"}


@pytest.mark.slow
@pytest.mark.parametrize("way", ["first cell", "by hand"])
def test_nothing_colab_has_is_replaced(colab, plans, way):
    """Neither install replaces or upgrades a package Colab has: torch 2.11.0+cu128 stays, so do
    cuda-bindings 12.9.7, cuda-core 0.3.2, ipywidgets 7.7.1 and anywidget 0.9.21."""
    new = _new(plans[way])
    replaced = {n: f"{colab['packages'][n]} -> {v}" for n, v in new.items() if n in colab["packages"]}
    assert replaced == {}, f"{way} replaces Colab's packages (Python {colab['snapshot']['python']} there, " \
                           f"{plans[way]['environment']['python_full_version']} here)"
    assert "torch" not in new


@pytest.mark.parametrize("way", ["first cell", "by hand"])
def test_cuda_stays_12_and_ninja_arrives(colab, plans, way):
    """CUDA-versioned packages stay on CUDA 12 (nothing for CUDA 13 is added) and ninja is installed."""
    new = _new(plans[way])
    final = {**colab["packages"], **new}
    assert Version(final["cuda-bindings"]).major == 12
    cu13 = [n for n, v in new.items() if n.endswith("-cu13") or (n.startswith(("cuda-", "nvidia-")) and
                                                                 not n.endswith("-cu12") and Version(v).major >= 13)]
    assert cu13 == []
    assert "ninja" in new, "Colab has no ninja; jitlab's install must bring it"


@pytest.mark.parametrize("way", ["first cell", "by hand"])
def test_no_installed_requirement_is_broken(colab, plans, way):
    """Every requirement of Colab's packages and of the new ones holds after the install, as pip's
    resolver does not check the installed ones (numba-cuda 0.22.2 requires cuda-core<1.0)."""
    new = _new(plans[way])
    final = {**colab["packages"], **new}
    marker_env = {**default_environment(), **{k: plans[way]["environment"][k] for k in (
        "python_version", "python_full_version", "sys_platform", "platform_system", "platform_machine")}}
    requires = {**colab["requires"], **{canonical(i["metadata"]["name"]): i["metadata"].get("requires_dist", [])
                                        for i in plans[way]["install"]}}
    broken = []
    for pkg, reqs in requires.items():
        for text in reqs:
            req = Requirement(text)
            if req.marker and not req.marker.evaluate({**marker_env, "extra": ""}):
                continue
            name = canonical(req.name)
            if name in new or pkg in new:
                have = final.get(name)
                if have is None and pkg in new and name != "jitlab":
                    broken.append(f"{pkg} needs {text}: not installed")
                elif have is not None and not req.specifier.contains(have, prereleases=True):
                    broken.append(f"{pkg} needs {text}: {have} there")
    assert broken == []
