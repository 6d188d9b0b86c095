"""The lessons' first cell (the Colab bootstrap) and the builds after it, with no ninja, as on Colab.

Colab has no ninja until jitlab's install brings it. Here PATH keeps every tool but ninja (each
folder holding one is replaced by a folder of links to everything else in it) and the ``ninja``
package cannot be imported. The first cell runs in a fresh process that Colab's kernel would be
(``google.colab`` imported, the checkout already cloned next to it, pip in ``--dry-run`` so this
machine's environment is left as it is), then builds that need no ninja are made in it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

import jitlab

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def path_without_ninja(tmp: Path) -> str:
    """This PATH, each folder that holds ``ninja`` swapped for a folder of links to its other entries."""
    out = []
    for i, folder in enumerate(filter(None, os.environ.get("PATH", "").split(os.pathsep))):
        if not (Path(folder) / "ninja").exists():
            out.append(folder)
            continue
        mirror = tmp / f"path{i}"
        mirror.mkdir()
        for entry in os.scandir(folder):
            if entry.name != "ninja":
                (mirror / entry.name).symlink_to(entry.path)
        out.append(str(mirror))
    return os.pathsep.join(out)


def first_cell(path: Path) -> str:
    return nbformat.read(path, as_version=4).cells[0].source


def test_every_lesson_has_the_same_first_cell():
    """One bootstrap for every lesson, so running it once below stands for all of them."""
    assert len({first_cell(p) for p in NOTEBOOKS}) == 1, "the lessons' first cells differ"
    assert "extra = f\"[cu{torch.version.cuda.split('.')[0]}]\"" in first_cell(NOTEBOOKS[0])


# What the Colab kernel runs: the bootstrap cell, then a kernel-only build (NVRTC) and an nvcc
# compile-only build for the T4, none of which needs ninja; the last line reports back as JSON.
PROGRAM = """
import json, shutil, sys, types
sys.modules["ninja"] = None                                     # no ninja package either
sys.modules["google.colab"] = types.ModuleType("google.colab")  # the cell asks for this
exec(compile(CELL, "<first cell>", "exec"))
import jitlab
nvrtc = jitlab.build("kernels/saxpy.cu", compile_only=True, arch=["sm_75"], engine="nvrtc")
nvcc = jitlab.build("kernels/add2.cu", compile_only=True, arch=["sm_75"])
print(json.dumps({"cwd": __import__("os").getcwd(), "ninja": shutil.which("ninja"), "jitlab": jitlab.__file__,
                  "engines": [nvrtc.manifest.engine, nvcc.manifest.engine]}))
"""


@pytest.mark.slow
def test_first_cell_runs_on_a_colab_like_machine_without_ninja(tmp_path):
    """The bootstrap cell runs (pip asked for jitlab with the extra matching torch), prints the
    environment with ninja missing and the first build's wait said once, and NVRTC and nvcc
    compile-only builds for sm_75 follow, all with no ninja anywhere."""
    (tmp_path / "content").mkdir()
    (tmp_path / "content" / "jitlab").symlink_to(ROOT)  # what the cell's `git clone` would leave
    # pip in --dry-run; without build isolation, whose inner pip would inherit the dry run and leave
    # its setuptools uninstalled (this venv has setuptools; Colab's pip builds isolated, from PyPI).
    env = {**os.environ, "PATH": path_without_ninja(tmp_path), "PIP_DRY_RUN": "1", "PIP_NO_BUILD_ISOLATION": "0",
           "JITLAB_CACHE_DIR": str(tmp_path / "cache"), "JITLAB_PCH_DIR": str(tmp_path / "pch"),  # none made yet
           "PYTHONPATH": ""}
    program = f"CELL = {json.dumps(first_cell(NOTEBOOKS[0]))}\n{PROGRAM}"
    proc = subprocess.run([sys.executable, "-c", program], cwd=tmp_path / "content", env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["ninja"] is None
    assert Path(report["cwd"]).resolve() == ROOT and Path(report["jitlab"]).resolve().parent == ROOT / "jitlab"
    assert report["engines"] == ["nvrtc", "nvcc"]
    lines = proc.stdout.splitlines()
    assert any(ln.startswith("ninja:") and "not found" in ln for ln in lines), proc.stdout
    waits = [ln for ln in lines if ln.startswith("first build:")]
    assert len(waits) == 1 and "precompiles torch's headers once" in waits[0], proc.stdout


@pytest.mark.slow
def test_torch_style_build_runs_without_ninja(cache, monkeypatch, tmp_path):
    """A torch-style snippet (split: jitlab drives the compilers) builds and runs with no ninja anywhere."""
    monkeypatch.setenv("PATH", path_without_ninja(tmp_path))
    monkeypatch.setitem(sys.modules, "ninja", None)
    from jitlab.jit import ninja_tool

    assert ninja_tool.ninja_path() is None
    m = jitlab.load(ROOT / "kernels" / "square_matrix_cpu.cpp")
    import torch

    x = torch.arange(6.0).reshape(2, 3)
    assert torch.equal(m.square_matrix_cpu(x), x * x)
