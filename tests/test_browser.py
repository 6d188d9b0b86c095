"""The playground panel in a real browser: JupyterLab on localhost, headless Chromium, Playwright.

One test: a notebook whose cell shows ``jitlab.playground("kernels/add2_cpu.cpp")`` (a kernel-only
C++ snippet, about a second to build) is opened in Debian's Chromium, driven by Playwright's Python
API. The test clicks Build and Check and reads the verdict from the page, then types a wrong kernel
(a - b) into the panel's editor and reads the checker's FAIL and its reason.

Needs ``/usr/bin/chromium`` (``apt-get install -y chromium``; ``.ci/run`` does it) and the test
extra (jupyterlab, ipykernel, ipywidgets, nbformat, playwright). Playwright's own browser downloads are never
used. When something is missing the test FAILS naming the fix: it is part of CI, and a skipped
test must not count as passing. On a failure it saves a screenshot and prints its path.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow]

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
# Flags that work as root in a container, without network; Playwright passes --headless and a
# fresh --user-data-dir (a temporary profile it deletes) itself too.
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
NOTEBOOK = "playground.ipynb"
SNIPPET = "kernels/add2_cpu.cpp"
CELL = f'import jitlab\njitlab.playground("{SNIPPET}")'

# Generous: the CI machine has 2 cores shared with other jobs.
SERVER_S = 120      # JupyterLab answering
PANEL_S = 180       # kernel start + import torch + jitlab + the panel rendered
STEP_S = 120        # one Build or Check on the panel's background thread
BUILT = r"built in|cache hit"


def _require_tools() -> None:
    """Fail (not skip) with the fix when Chromium or a Python package is missing."""
    missing = []
    if not os.access(CHROMIUM, os.X_OK):
        missing.append(f"{CHROMIUM} not found: install Debian's Chromium with `apt-get install -y chromium` "
                       "(.ci/run does this; `playwright install` is not used)")
    for module, package in [("playwright.sync_api", "playwright"), ("jupyterlab", "jupyterlab"),
                            ("nbformat", "nbformat"), ("ipywidgets", "ipywidgets"), ("ipykernel", "ipykernel")]:
        try:
            importlib.import_module(module)
        except ImportError:
            missing.append(f"Python package {package!r} missing: `{sys.executable} -m pip install -e '.[test]'`")
    if missing:
        pytest.fail("the browser test cannot run:\n  " + "\n  ".join(missing), pytrace=False)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _prepend(path: Path, var: str) -> str:
    """path, then what the environment variable var already holds."""
    return os.pathsep.join([str(path), *filter(None, [os.environ.get(var)])])


class Lab:
    """A JupyterLab server process on localhost and its REST API."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.token = secrets.token_hex(16)
        self.port = _free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log = folder / "jupyterlab.log"
        # No proxies for localhost, whatever the environment says.
        self._http = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        jupyter = folder / ".jupyter"
        # The python3 kernel is this interpreter (the .venv's, with torch and jitlab), not whatever
        # kernelspec a user, venv or system folder holds: JUPYTER_PATH comes first on Jupyter's path.
        spec = jupyter / "path" / "kernels" / "python3"
        spec.mkdir(parents=True)
        (spec / "kernel.json").write_text(json.dumps({
            "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
            "display_name": "Python 3 (jitlab test)", "language": "python"}))
        # No toasts ("get notified about Jupyter news?") over the page.
        settings = jupyter / "config" / "lab" / "user-settings" / "@jupyterlab" / "apputils-extension"
        settings.mkdir(parents=True)
        (settings / "notification.jupyterlab-settings").write_text(
            json.dumps({"fetchNews": "false", "checkForUpdates": False, "doNotDisturbMode": True}))
        env = dict(os.environ, JITLAB_CACHE_DIR=str(folder / "cache"),
                   JUPYTER_PATH=_prepend(jupyter / "path", "JUPYTER_PATH"),
                   JUPYTER_CONFIG_DIR=str(jupyter / "config"), JUPYTER_DATA_DIR=str(jupyter / "data"),
                   JUPYTER_RUNTIME_DIR=str(jupyter / "runtime"), PYTHONPATH=_prepend(ROOT, "PYTHONPATH"))
        cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root",
               "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={self.port}", "--ServerApp.port_retries=0",
               f"--IdentityProvider.token={self.token}", f"--ServerApp.root_dir={folder}",
               "--LabApp.news_url=None", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]
        with open(self.log, "w") as log:
            # Its own process group, so the finalizer can end whatever it started.
            self.proc = subprocess.Popen(cmd, cwd=folder, env=env, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)

    def url(self, path: str) -> str:
        return f"{self.base}/{path}?token={self.token}"

    def api(self, path: str, method: str = "GET"):
        req = urllib.request.Request(f"{self.base}/api/{path}", method=method,
                                     headers={"Authorization": f"token {self.token}"})
        with self._http.open(req, timeout=10) as r:
            body = r.read()
        return json.loads(body) if body else None

    def log_tail(self, n: int = 40) -> str:
        lines = self.log.read_text(errors="replace").splitlines()
        return "\n".join(lines[-n:])

    def wait_ready(self) -> None:
        deadline = time.monotonic() + SERVER_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"JupyterLab exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                self.api("status")
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(0.5)
                continue
            argv = self.api("kernelspecs")["kernelspecs"]["python3"]["spec"]["argv"]
            assert argv[0] == sys.executable, f"the python3 kernel is not this python: {argv}"
            return
        raise AssertionError(f"JupyterLab did not answer on {self.base} in {SERVER_S} s:\n{self.log_tail()}")

    def wait_kernel_idle(self, notebook: str, timeout: float) -> None:
        """Wait until the notebook's kernel has started and is idle."""
        deadline, state = time.monotonic() + timeout, "no session yet"
        while time.monotonic() < deadline:
            for s in self.api("sessions"):
                if s.get("path") == notebook and s.get("kernel"):
                    state = self.api(f"kernels/{s['kernel']['id']}").get("execution_state")
                    if state == "idle":
                        return
            time.sleep(0.5)
        raise AssertionError(f"the kernel of {notebook} is not idle after {timeout} s ({state}):\n{self.log_tail()}")

    def stop(self) -> None:
        """Shut the kernels down, then the server; kill its process group if it does not stop."""
        if self.proc.poll() is None:
            with contextlib.suppress(Exception):
                for k in self.api("kernels"):
                    self.api(f"kernels/{k['id']}", method="DELETE")
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                pass
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)  # the group this test started, leftovers only
        self.proc.wait()


@pytest.fixture
def workdir(tmp_path, kernel_copy) -> Path:
    """tmp_path with the snippet, its reference and a notebook showing the panel."""
    import nbformat

    kernel_copy("add2_cpu.cpp")
    kernel_copy("add2_cpu.ref.py")
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(CELL)]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, tmp_path / NOTEBOOK)
    return tmp_path


@pytest.fixture
def lab(workdir):
    """JupyterLab serving workdir with a fresh build cache; stopped even when the test fails."""
    server = Lab(workdir)
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()


@pytest.fixture
def page(workdir):
    """A page in Debian's headless Chromium, driven by Playwright (a fresh profile per launch)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            yield browser.new_page(viewport={"width": 1400, "height": 1000})
        finally:
            browser.close()


@contextlib.contextmanager
def _screenshot_on_failure(page, lab: Lab):
    try:
        yield
    except BaseException:
        shot = lab.folder / "browser-failure.png"
        with contextlib.suppress(Exception):
            page.screenshot(path=str(shot), full_page=True)
            print(f"\nscreenshot of the failing page: {shot}")
        print(f"JupyterLab log: {lab.log}\n{lab.log_tail()}")
        raise


def _open_panel(page, lab: Lab):
    """Open the notebook, run its cell once the kernel is idle, return the rendered panel."""
    page.goto(lab.url(f"lab/tree/{NOTEBOOK}"))
    cell = page.locator(".jp-Notebook .jp-CodeCell").first
    cell.locator(".cm-content").wait_for(timeout=PANEL_S * 1000)
    lab.wait_kernel_idle(NOTEBOOK, PANEL_S)
    cell.locator(".cm-content").click()
    page.keyboard.press("Shift+Enter")
    # The panel, or the traceback the cell printed instead.
    panel = cell.locator(".jitlab-playground")
    error = cell.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']")
    panel.or_(error).first.wait_for(timeout=PANEL_S * 1000)
    if not panel.count():
        raise AssertionError(f"the cell did not show the panel:\n{error.first.inner_text()}")
    return panel


def _click_and_wait(panel, button: str, pattern: str, timeout: float = STEP_S) -> str:
    """Click a panel button; wait until the status line changes and matches pattern; return it."""
    before = panel.locator(".jitlab-status").inner_text()
    panel.get_by_role("button", name=button, exact=True).click()
    return _wait_status(panel, before, pattern, timeout, after=button)


SCREENS = ROOT / "build_cache" / "screens"  # not committed: build_cache/ is ignored


def _shot(page, panel, state: str) -> None:
    """Keep a screenshot of the panel in ``state`` (build_cache/screens/panel-STATE.png) to look at."""
    SCREENS.mkdir(parents=True, exist_ok=True)
    panel.scroll_into_view_if_needed()
    panel.screenshot(path=str(SCREENS / f"panel-{state}.png"))


def _type_into_editor(page, panel, text: str) -> None:
    """Replace the CodeMirror editor's text as a person would: click, select all, type (insert_text:
    typing key by key would let the editor re-indent)."""
    panel.locator(".jitlab-editor .cm-content").click()
    page.keyboard.press("Control+a")
    page.keyboard.insert_text(text)


def _wait_status(panel, before: str, pattern: str, timeout: float = STEP_S, after: str = "the key") -> str:
    """Wait until the status line differs from ``before`` and matches ``pattern``; return it."""
    status = panel.locator(".jitlab-status")
    deadline, text = time.monotonic() + timeout, before
    while time.monotonic() < deadline:
        text = status.inner_text()
        if text != before and re.search(pattern, text):
            return text
        time.sleep(0.2)
    raise AssertionError(f"after {after}, the status never matched {pattern!r} in {timeout} s: {text!r}\n"
                         f"result area:\n{panel.locator('.jitlab-result').inner_text()}")


def test_playground_build_and_check_in_chromium(request):
    """Build and Check in the browser read PASS; a wrong kernel typed into the editor reads FAIL; a
    syntax error after Shift-Enter in the editor reads "compile error" with its line marked; Bench
    times it. A screenshot of each state is kept in build_cache/screens/."""
    _require_tools()  # in the test itself, so a missing tool reads FAILED, not ERROR or SKIPPED
    from playwright.sync_api import expect

    workdir, lab, page = (request.getfixturevalue(f) for f in ("workdir", "lab", "page"))

    with _screenshot_on_failure(page, lab):
        panel = _open_panel(page, lab)
        for name in ("Build", "Check", "Bench"):
            expect(panel.get_by_role("button", name=name, exact=True)).to_be_visible()
        result = panel.locator(".jitlab-result")
        # A real code editor: line numbers, C++ highlighting.
        expect(panel.locator(".jitlab-editor .cm-lineNumbers")).to_be_visible()
        assert panel.locator(".jitlab-editor .cm-content [class*='tok-'], .jitlab-editor .cm-content span").count() > 0
        _shot(page, panel, "ready")

        status = _click_and_wait(panel, "Build", BUILT)
        print("\nstatus after Build:", status)
        assert "built in" in status, f"a fresh cache, yet no build: {status!r}"
        assert list((workdir / "cache").glob("add2_cpu_*")), "the build is not in the test's JITLAB_CACHE_DIR"
        # A successful build shows one status line; its log is folded under "log", not spread out.
        assert result.inner_text().strip() in ("", "log"), f"the build log is not folded:\n{result.inner_text()}"
        _shot(page, panel, "built")
        status = _click_and_wait(panel, "Check", r"PASS|FAIL")
        print("status after Check:", status)
        expect(result).to_contain_text("PASS", timeout=STEP_S * 1000)
        text = result.inner_text()
        print("result:", text)
        assert "PASS" in status and "FAIL" not in status, status
        assert "PASS" in text and "FAIL" not in text, text
        _shot(page, panel, "pass")

        # A syntax error, then Shift-Enter in the editor (build and check): the status names the line
        # and the editor marks it.
        source = (workdir / SNIPPET).read_text()
        broken_line = next(i for i, ln in enumerate(source.splitlines(), 1) if "a[i] + b[i]" in ln)
        _type_into_editor(page, panel, source.replace("a[i] + b[i]", "a[i] + b[i] +"))
        before = panel.locator(".jitlab-status").inner_text()
        page.keyboard.press("Shift+Enter")
        status = _wait_status(panel, before, r"compile error")
        print("status after Shift-Enter on a syntax error:", status)
        assert f"add2_cpu.cpp:{broken_line + 1}" in status or f"add2_cpu.cpp:{broken_line}" in status, status
        marked = panel.locator(".jitlab-editor .cm-jitlab-error-line")
        expect(marked.first).to_be_visible(timeout=10_000)
        _shot(page, panel, "compile-error")

        # A wrong kernel, typed into the panel's editor: c = a - b.
        wrong = source.replace("a[i] + b[i]", "a[i] - b[i]")
        assert wrong != source
        _type_into_editor(page, panel, wrong)
        status = _click_and_wait(panel, "Build", BUILT)
        print("status after Build:", status)
        assert "built in" in status, f"an edited kernel, yet no build: {status!r}"
        status = _click_and_wait(panel, "Check", r"PASS|FAIL")
        print("status after Check:", status)
        expect(result).to_contain_text("FAIL", timeout=STEP_S * 1000)
        text = result.inner_text()
        print("result:", text)
        assert "FAIL" in status, status
        assert "differ" in text, f"no reason from the checker in the result:\n{text}"
        # The FAIL status is long: it must wrap, never be clipped (its box holds all its text).
        box = panel.locator(".jitlab-status")
        sizes = box.evaluate("e => [e.scrollWidth, e.clientWidth, e.scrollHeight, e.clientHeight]")
        assert sizes[0] <= sizes[1] + 1 and sizes[2] <= sizes[3] + 1, f"status clipped (scroll/client w, h): {sizes}"
        assert "PASS" not in text, f"the result area still shows the earlier verdict:\n{text}"
        assert panel.locator(".jitlab-editor .cm-jitlab-error-line").count() == 0, "a fixed line is still marked"
        _shot(page, panel, "fail")

        # Ctrl-S in the editor saves (the file on disk is the editor's text), then Bench times it.
        _type_into_editor(page, panel, source)
        before = panel.locator(".jitlab-status").inner_text()
        page.keyboard.press("Control+s")
        _wait_status(panel, before, r"saved")
        assert (workdir / SNIPPET).read_text() == source
        status = _click_and_wait(panel, "Bench", r"bench|FAIL")
        print("status after Bench:", status)
        assert status.startswith("bench:"), status
        _shot(page, panel, "bench")
