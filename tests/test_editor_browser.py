"""The code editor widget in a real browser: JupyterLab on localhost, headless Chromium, Playwright.

One notebook cell shows ``jitlab.notebook.editor.Editor`` holding ``kernels/saxpy.cu``, with a Label
its callbacks write to: Ctrl-S shows the saved text's last line, Shift-Enter marks every line holding
"oops" as an error (as the panel will after a failed build). The test checks line numbers and CUDA
highlighting, types, presses Ctrl-S and Shift-Enter and reads the Label, sees the marked line (and
scrolled to), checks that JupyterLab neither saved the notebook nor ran the cell, then sets ``value``
from a second cell and sees the text replaced with the cursor and scroll kept. It saves a screenshot
to ``build_cache/screens/editor.png``.

The JupyterLab server and Chromium fixtures come from tests/test_browser.py (same requirements).
"""

from __future__ import annotations

import re
import time

import pytest
import test_browser
from test_browser import PANEL_S, ROOT, _require_tools, _screenshot_on_failure

# test_browser's fixtures: JupyterLab serving this module's workdir, and a Chromium page.
lab, page = test_browser.lab, test_browser.page

pytestmark = [pytest.mark.browser, pytest.mark.slow]

NOTEBOOK = "editor.ipynb"
SCREENSHOT = ROOT / "build_cache" / "screens" / "editor.png"
CELL = '''\
import ipywidgets as w
from jitlab.notebook.editor import Editor

ed = Editor(open("kernels/saxpy.cu").read(), language="cuda", height="17em")
events = w.Label("no event yet")
events.add_class("editor-events")

def saved(e):
    events.value = f"saved {len(e.value.splitlines())} lines, last: {e.value.splitlines()[-1].strip()}"

def build(e):
    e.error_lines = []  # so the same lines again still scroll to the first
    e.error_lines = [i for i, line in enumerate(e.value.splitlines(), 1) if "oops" in line]
    events.value = f"build: error_lines={e.error_lines}"

ed.on_save(saved)
ed.on_build(build)
w.VBox([ed, events])'''
EVENT_S = 30  # a key press to the kernel and the Label's new text back


@pytest.fixture
def workdir(tmp_path, kernel_copy):
    """tmp_path with kernels/saxpy.cu and a notebook showing the editor (test_browser's lab uses it)."""
    import nbformat

    kernel_copy("saxpy.cu")
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(CELL)]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, tmp_path / NOTEBOOK)
    return tmp_path


def _wait_text(locator, pattern: str, timeout: float = EVENT_S) -> str:
    """Wait until the element's text matches pattern; return the text."""
    from playwright.sync_api import expect

    expect(locator).to_have_text(re.compile(pattern), timeout=timeout * 1000)
    return locator.inner_text()


def test_editor_widget_in_chromium(request):
    """Highlighting, line numbers, Ctrl-S and Shift-Enter reach Python, error lines are marked."""
    _require_tools()
    from playwright.sync_api import expect

    workdir, lab, page = (request.getfixturevalue(f) for f in ("workdir", "lab", "page"))
    with _screenshot_on_failure(page, lab):
        page.goto(lab.url(f"lab/tree/{NOTEBOOK}"))
        cell = page.locator(".jp-Notebook .jp-CodeCell").first
        cell.locator(".jp-InputArea .cm-content").wait_for(timeout=PANEL_S * 1000)
        lab.wait_kernel_idle(NOTEBOOK, PANEL_S)
        cell.locator(".jp-InputArea .cm-content").click()
        page.keyboard.press("Shift+Enter")
        editor = cell.locator(".jitlab-code-editor .cm-editor")
        error = cell.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']")
        editor.or_(error).first.wait_for(timeout=PANEL_S * 1000)
        assert editor.count(), f"the cell did not show the editor:\n{error.first.inner_text()}"
        events = cell.locator(".editor-events")
        prompt = cell.locator(".jp-InputPrompt")
        expect(prompt).to_have_text("[1]:", timeout=PANEL_S * 1000)
        cells = page.locator(".jp-Notebook .jp-Cell").count()

        # Line numbers for every line, CUDA words and C++ syntax highlighted.
        source = (workdir / "kernels" / "saxpy.cu").read_text()
        numbers = editor.locator(".cm-lineNumbers .cm-gutterElement").all_inner_texts()
        assert str(source.count("\n")) in numbers and "1" in numbers, numbers
        expect(editor.locator(".cm-cuda-keyword", has_text="__global__")).to_be_visible()
        expect(editor.locator(".cm-cuda-builtin", has_text="threadIdx")).to_be_visible()
        style = editor.locator(".cm-cuda-keyword").first.evaluate(
            "e => [getComputedStyle(e).color, getComputedStyle(e).fontWeight]")
        assert style == ["rgb(0, 128, 0)", "700"], style  # JupyterLab's keyword green, bold
        highlighted = editor.locator(".cm-line span").evaluate_all(
            "es => es.filter(e => getComputedStyle(e).fontStyle === 'italic').length")
        assert highlighted >= 3, "comments are not highlighted"

        # Type at the end (letters that are JupyterLab command-mode keys: a, b, d d, m must not act),
        # then Ctrl-S: the callback sees the text typed a moment before.
        saved_at = lab.api(f"contents/{NOTEBOOK}?content=0")["last_modified"]
        editor.locator(".cm-content").click()
        page.keyboard.press("Control+End")
        page.keyboard.type("\n// a bad mdd oops")
        page.keyboard.press("Control+s")
        text = _wait_text(events, r"^saved ")
        n = source.count("\n") + 2  # the file ends with a newline: the typed line is one after the empty last one
        assert text == f"saved {n} lines, last: // a bad mdd oops", text

        # Shift-Enter: build, no newline, the cell not run again, JupyterLab's notebook not saved.
        page.keyboard.press("Shift+Enter")
        text = _wait_text(events, r"^build: ")
        assert text == f"build: error_lines=[{n}]", text
        marked = editor.locator(".cm-jitlab-error-line")
        expect(marked).to_have_count(1)
        expect(marked).to_have_text("// a bad mdd oops")
        expect(editor.locator(".cm-jitlab-error-marker")).to_have_count(1)
        assert editor.locator(".cm-line").last.inner_text() == "// a bad mdd oops", "Shift-Enter typed a newline"
        time.sleep(1.0)  # what a wrongly run cell would need to show
        expect(prompt).to_have_text("[1]:")
        assert page.locator(".jp-Notebook .jp-Cell").count() == cells, "a key reached JupyterLab's command mode"
        assert lab.api(f"contents/{NOTEBOOK}?content=0")["last_modified"] == saved_at, "Ctrl-S saved the notebook"
        background = marked.evaluate("e => getComputedStyle(e).backgroundColor")
        assert background.startswith("rgba(229, 57, 53"), background

        # Back at the top, Shift-Enter again: the error line is scrolled into view in the short editor.
        page.keyboard.press("Control+Home")
        scroller = editor.locator(".cm-scroller")
        expect(scroller).to_have_js_property("scrollTop", 0)
        page.keyboard.press("Shift+Enter")  # the same error_lines again: still scrolled to
        page.wait_for_function("e => e.scrollTop > 0", arg=scroller.element_handle(), timeout=EVENT_S * 1000)
        box, line = scroller.bounding_box(), marked.bounding_box()
        assert box["y"] <= line["y"] and line["y"] + line["height"] <= box["y"] + box["height"], (box, line)

        # Python sets the text (what a reload from disk does): replaced, cursor and scroll kept.
        top = scroller.evaluate("e => e.scrollTop")
        second = page.locator(".jp-Notebook .jp-CodeCell").nth(1).locator(".jp-InputArea .cm-content")
        second.click()
        page.keyboard.type('ed.value = ed.value.replace("a * x[i]", "a * x[i] /* from python */")')
        page.keyboard.press("Shift+Enter")
        expect(editor.locator(".cm-line", has_text="/* from python */")).to_have_count(1, timeout=EVENT_S * 1000)
        expect(editor.locator(".cm-activeLine")).to_have_text(source.splitlines()[0])  # the cursor: still line 1
        assert scroller.evaluate("e => e.scrollTop") == top

        SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
        cell.locator(".jp-OutputArea").screenshot(path=str(SCREENSHOT))
        print(f"\nscreenshot: {SCREENSHOT}")
