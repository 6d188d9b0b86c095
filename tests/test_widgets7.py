"""The playground panel and the editor on Colab's widget stack: ipywidgets 7 and anywidget 0.9.

Colab ships ipywidgets 7.7.1 and anywidget 0.9.21 (colab/constraints-2026-08.txt), whose APIs differ
from the 8.x this venv has (ipywidgets 7 widgets display through ``_ipython_display_`` and have no
``_repr_mimebundle_``; anywidget 0.9 keeps its ES module as ``_esm`` on ipywidgets 7's DOMWidget).
Those exact releases are installed into a folder put first on ``sys.path`` (``pip --target``, from
PyPI: about a second with pip's cache), and the editor's tests and the panel's widget tests run
there in a child process. Needs PyPI (marker ``net``). (The panel in Colab's classic Notebook 6.5.7
with these widgets, in headless Chromium, was looked at by hand: docs/colab-notebook6-widgets7.png;
as a test it rendered once in several runs here, so it is not one.)
"""

from __future__ import annotations

import fcntl
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import run_dir

ROOT = Path(__file__).resolve().parent.parent
CONSTRAINTS = ROOT / "colab" / "constraints-2026-08.txt"
#: Colab's widget packages, at the versions its constraints file pins.
WIDGETS = ("ipywidgets", "anywidget", "ipython-genutils")
#: Panel tests that drive the widgets' ipywidgets-7-sensitive paths (display, buttons, HTML/Label
#: updates, layout); the worker's checks and hot reload need no widget of their own.
PANEL_TESTS = "display or build_button or compile_error_log or buttons_disabled"

pytestmark = pytest.mark.net


def colab_pins(names=WIDGETS) -> list[str]:
    text = CONSTRAINTS.read_text()
    pins = [re.search(rf"^{re.sub(r'[-_.]', '[-_.]', name)}==\S+$", text, re.M | re.I) for name in names]
    assert all(pins), f"{CONSTRAINTS.name} lacks one of {names}"
    return [m.group(0) for m in pins]


@pytest.fixture(scope="module")
def widgets7(tmp_path_factory) -> dict:
    """Environment whose ``sys.path`` starts with Colab's ipywidgets and anywidget (installed once per
    test run; pytest-xdist workers share the folder)."""
    folder = run_dir(tmp_path_factory, "widgets7")
    target = folder / "site"
    with open(folder / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (folder / "done").is_file():
            proc = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--only-binary=:all:",
                                   "--upgrade", "--target", str(target), *colab_pins()], capture_output=True, text=True,
                                  timeout=240, env={**os.environ, "PIP_CONFIG_FILE": os.devnull})
            assert proc.returncode == 0, f"pip could not fetch Colab's widget packages (needs PyPI):\n{proc.stderr[-2000:]}"
            (folder / "done").write_text("")
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(target), str(ROOT)])}


@pytest.mark.slow
def test_the_child_sees_colabs_widget_versions(widgets7):
    """The child process imports ipywidgets 7.7.1 and anywidget 0.9.21, not this venv's."""
    out = subprocess.run([sys.executable, "-c", "import ipywidgets, anywidget; print(ipywidgets.__version__, "
                          "anywidget.__version__)"], env=widgets7, capture_output=True, text=True, check=True).stdout
    assert out.split() == [p.split("==")[1] for p in colab_pins()[:2]]


@pytest.mark.slow
def test_editor_and_panel_work_with_ipywidgets7(widgets7):
    """The editor's tests and the panel's widget tests pass on ipywidgets 7.7.1 + anywidget 0.9.21."""
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "ignore",
                           "tests/test_editor.py", "tests/test_playground.py", "-k", f"(test_editor and not node) or {PANEL_TESTS}"],
                          cwd=ROOT, env=widgets7, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert re.search(r"\b([1-9]\d*) passed", proc.stdout) and " skipped" not in proc.stdout, proc.stdout[-500:]

