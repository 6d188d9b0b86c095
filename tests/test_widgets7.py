"""The playground panel and the editor on Colab's widget stack: ipywidgets 7 and anywidget 0.9.

Colab ships ipywidgets 7.7.1 and anywidget 0.9.21 (colab/constraints-2026-08.txt), whose APIs differ
from the 8.x this venv has (ipywidgets 7 widgets display through ``_ipython_display_`` and have no
``_repr_mimebundle_``; anywidget 0.9 keeps its ES module as ``_esm`` on ipywidgets 7's DOMWidget).
Those exact releases are installed into a folder put first on ``sys.path`` (``pip --target``, from
PyPI: about a second with pip's cache), and the editor's tests and the panel's widget tests run
there in a child process; a browser test opens the playground in Colab's classic Notebook 6.5.7 with
those widgets, in headless Chromium, builds, and keeps a screenshot
(``build_cache/screens/colab-notebook6-widgets7.png``). Needs PyPI (marker ``net``).
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CONSTRAINTS = ROOT / "colab" / "constraints-2026-08.txt"
#: Colab's widget packages, at the versions its constraints file pins, and its classic notebook server.
WIDGETS = ("ipywidgets", "anywidget", "ipython-genutils")
NOTEBOOK6 = ("notebook", "nbclassic", "widgetsnbextension", "nest-asyncio")
#: Panel tests that drive the widgets' ipywidgets-7-sensitive paths (display, buttons, HTML/Label
#: updates, layout); the worker's checks and hot reload need no widget of their own.
PANEL_TESTS = "display or build_button or compile_error_log or buttons_disabled"

pytestmark = pytest.mark.net


def colab_pins(names=WIDGETS) -> list[str]:
    text = CONSTRAINTS.read_text()
    pins = [re.search(rf"^{re.escape(name)}==\S+$", text, re.M | re.I) for name in names]
    assert all(pins), f"{CONSTRAINTS.name} lacks one of {names}"
    return [m.group(0) for m in pins]


@pytest.fixture(scope="module")
def widgets7(tmp_path_factory) -> dict:
    """Environment whose ``sys.path`` starts with Colab's ipywidgets and anywidget."""
    target = tmp_path_factory.mktemp("widgets7")
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--only-binary=:all:",
                           "--target", str(target), *colab_pins(WIDGETS + NOTEBOOK6)], capture_output=True, text=True, timeout=240,
                          env={**os.environ, "PIP_CONFIG_FILE": os.devnull})
    assert proc.returncode == 0, f"pip could not fetch Colab's widget packages (needs PyPI):\n{proc.stderr[-2000:]}"
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(target), str(ROOT)]),
            # the target's nbextensions (widgets 7's and anywidget's) and the configs that turn them on
            "JUPYTER_PATH": str(target / "share" / "jupyter"), "JUPYTER_CONFIG_PATH": str(target / "etc" / "jupyter")}


def test_the_child_sees_colabs_widget_versions(widgets7):
    """The child process imports ipywidgets 7.7.1 and anywidget 0.9.21, not this venv's."""
    out = subprocess.run([sys.executable, "-c", "import ipywidgets, anywidget; print(ipywidgets.__version__, "
                          "anywidget.__version__)"], env=widgets7, capture_output=True, text=True, check=True).stdout
    assert out.split() == [p.split("==")[1] for p in colab_pins()[:2]]


def test_editor_and_panel_work_with_ipywidgets7(widgets7):
    """The editor's tests and the panel's widget tests pass on ipywidgets 7.7.1 + anywidget 0.9.21."""
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "ignore",
                           "tests/test_editor.py", "tests/test_playground.py", "-k", f"(test_editor and not node) or {PANEL_TESTS}"],
                          cwd=ROOT, env=widgets7, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert re.search(r"\b([1-9]\d*) passed", proc.stdout) and " skipped" not in proc.stdout, proc.stdout[-500:]


@pytest.mark.browser
def test_playground_builds_in_colabs_notebook6_with_widgets7(widgets7, tmp_path):
    """In classic Notebook 6.5.7 with ipywidgets 7.7.1 + anywidget 0.9.21, the playground's CodeMirror
    editor renders with the snippet and Build reports the build."""
    from playwright.sync_api import sync_playwright

    from test_browser import CHROMIUM, CHROMIUM_ARGS, _require_tools

    import nbformat

    _require_tools()
    work = tmp_path / "work"
    (work / "kernels").mkdir(parents=True)
    (work / "kernels" / "saxpy.cu").write_text((ROOT / "kernels" / "saxpy.cu").read_text())
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("import ipywidgets, anywidget, jitlab\n"
                                          "print('widgets', ipywidgets.__version__, anywidget.__version__)"),
                nbformat.v4.new_code_cell('jitlab.playground("kernels/saxpy.cu")')]
    nbformat.write(nb, work / "pg.ipynb")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**widgets7, "JITLAB_CACHE_DIR": str(tmp_path / "cache")}
    log = open(tmp_path / "server.log", "w")
    server = subprocess.Popen([sys.executable, "-m", "notebook", "--no-browser", f"--port={port}", "--ip=127.0.0.1",
                               "--NotebookApp.token=", "--NotebookApp.password=", "--allow-root"],
                              cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"{url}/api", timeout=2)
                break
            except OSError:
                assert time.monotonic() < deadline and server.poll() is None, (tmp_path / "server.log").read_text()[-2000:]
                time.sleep(0.3)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1200, "height": 1000})
            page.goto(f"{url}/notebooks/pg.ipynb")
            page.wait_for_function("window.Jupyter && Jupyter.notebook && Jupyter.notebook.kernel"
                                   " && Jupyter.notebook.kernel.is_connected()", timeout=60_000)
            page.evaluate("Jupyter.notebook.execute_all_cells()")
            page.wait_for_selector(".cm-editor .cm-content", timeout=180_000)
            assert "__global__ void saxpy" in page.inner_text(".cm-editor .cm-content")
            page.get_by_role("button", name="Build").click()
            page.wait_for_function("document.querySelector('#notebook-container').innerText"
                                   ".match(/built in|cache hit/)", timeout=120_000)
            text = page.inner_text("#notebook-container")
            shots = ROOT / "build_cache" / "screens"
            shots.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(shots / "colab-notebook6-widgets7.png"), full_page=True)
            browser.close()
        assert "widgets 7.7.1 0.9.21" in text
        assert re.search(r"saxpy \[sm_75\]: \d+ registers", text), text[-1500:]
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()
