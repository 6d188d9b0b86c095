"""A lesson's GPU cells on a machine without a GPU, in a real browser: JupyterLab, headless Chromium.

A notebook with ``%load_ext jitlab``, a ``%%cuda --device cuda`` cell, a cell that loads a CUDA snippet with
``device="cuda"`` (without it, both run on the CPU emulator), a cell that
calls what the ``%%cuda`` cell would have bound, and a plain last cell is run with JupyterLab's own
Run All: every cell runs (Run All stops at a failed cell, so the last one printing proves none
failed), each GPU cell shows one line saying it needs a GPU and how to get one, and no traceback is
anywhere on the page. It saves ``build_cache/screens/nogpu-cells.png``. The same notebook shows the
``%%cuda`` cell highlighted as C++ by jitlab's JupyterLab extension (``jitlab/notebook/labextension``,
put on the server's ``JUPYTER_PATH`` as a pip install puts it in ``share/jupyter/labextensions``):
``build_cache/screens/cuda-cell-highlight.png``.

The JupyterLab server and Chromium fixtures come from tests/test_browser.py (same requirements).
"""

from __future__ import annotations

import re
import shutil

import pytest
import test_browser
import torch
from test_browser import PANEL_S, ROOT, _require_tools, _screenshot_on_failure

# test_browser's fixtures: JupyterLab serving this module's workdir, and a Chromium page.
lab, page = test_browser.lab, test_browser.page

pytestmark = [pytest.mark.browser, pytest.mark.skipif(torch.cuda.is_available(), reason="the no-GPU path")]

NOTEBOOK = "nogpu.ipynb"
SCREENSHOT = ROOT / "build_cache" / "screens" / "nogpu-cells.png"
HIGHLIGHT = ROOT / "build_cache" / "screens" / "cuda-cell-highlight.png"
LABEXTENSION = ROOT / "jitlab" / "notebook" / "labextension"
CELLS = [
    "%load_ext jitlab",
    "%%cuda vadd --device cuda\n// c = a + b, one thread per element\n__global__ void vadd(float* c, const float* a, "
    "const float* b, int n) {\n    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < n) c[i] = a[i] + b[i];\n}",
    'import jitlab\nsaxpy = jitlab.load("kernels/saxpy.cu", device="cuda")',
    "vadd(grid=1, block=1)",
    'print("the last cell ran")',
]


@pytest.fixture
def workdir(tmp_path, kernel_copy):
    """tmp_path with kernels/saxpy.cu, the notebook and jitlab's labextension where the server (on
    JUPYTER_PATH tmp_path/.jupyter/path, test_browser's lab) looks for labextensions."""
    import nbformat

    kernel_copy("saxpy.cu")
    shutil.copytree(LABEXTENSION, tmp_path / ".jupyter" / "path" / "labextensions" / "jitlab-cells")
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in CELLS]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, tmp_path / NOTEBOOK)
    return tmp_path


@pytest.mark.slow
def test_gpu_cells_show_one_line_and_run_all_goes_on_in_chromium(request):
    """Run All runs every cell; the %%cuda cell, the CUDA load and the call of the %%cuda cell's name
    each show one "needs a CUDA GPU" line, and the page holds no traceback."""
    _require_tools()
    from playwright.sync_api import expect

    workdir, lab, page = (request.getfixturevalue(f) for f in ("workdir", "lab", "page"))
    with _screenshot_on_failure(page, lab):
        page.goto(lab.url(f"lab/tree/{NOTEBOOK}"))
        cells = page.locator(".jp-Notebook .jp-CodeCell")
        cells.first.locator(".cm-content").wait_for(timeout=PANEL_S * 1000)
        lab.wait_kernel_idle(NOTEBOOK, PANEL_S)
        page.get_by_role("menuitem", name="Run", exact=True).click()
        page.get_by_role("menuitem", name=re.compile(r"^Run All Cells")).click()
        expect(cells.nth(4).locator(".jp-OutputArea-output")).to_have_text("the last cell ran", timeout=PANEL_S * 1000)

        for i in (1, 2, 3):
            out = cells.nth(i).locator(".jp-OutputArea-output")
            expect(out).to_have_count(1)
            text = out.inner_text().strip()
            assert text.startswith("needs a CUDA GPU") and "\n" not in text, (i, text)
            assert "Runtime → Change runtime type → T4 GPU" in text, text
        assert "binds vadd" in cells.nth(1).inner_text()
        assert "defines jitlab, saxpy" in cells.nth(2).inner_text()
        assert "`vadd` comes from cell [2] (`%%cuda vadd --device cuda`)" in cells.nth(3).inner_text()
        expect(page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']")).to_have_count(0)
        assert "Traceback" not in page.locator(".jp-Notebook").inner_text()

        SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
        page.locator(".jp-Notebook").screenshot(path=str(SCREENSHOT))
        print(f"\nscreenshot: {SCREENSHOT}")


def _italic(editor, text: str) -> bool:
    """Whether the editor shows ``text`` in an italic span (JupyterLab's comment style)."""
    return editor.locator("span", has_text=text).evaluate_all(
        "es => es.some(e => getComputedStyle(e).fontStyle === 'italic')")


@pytest.mark.slow
def test_cuda_cell_is_highlighted_as_cpp_in_chromium(request):
    """With jitlab's labextension a %%cuda cell is C++ (its // line a comment, `float` a type), while a
    Python cell stays Python; deleting the magic line gives the cell Python back."""
    _require_tools()
    from playwright.sync_api import expect

    workdir, lab, page = (request.getfixturevalue(f) for f in ("workdir", "lab", "page"))
    with _screenshot_on_failure(page, lab):
        page.goto(lab.url(f"lab/tree/{NOTEBOOK}"))
        cells = page.locator(".jp-Notebook .jp-CodeCell")
        cuda = cells.nth(1).locator(".jp-InputArea .cm-editor")
        cuda.locator(".cm-content").wait_for(timeout=PANEL_S * 1000)
        loaded = page.evaluate("JSON.parse(document.getElementById('jupyter-config-data').textContent)"
                               ".federated_extensions.map(e => e.name)")
        assert "jitlab-cells" in loaded, loaded
        expect(cuda.locator(".cm-content")).to_have_attribute("data-language", "cpp", timeout=30_000)
        assert _italic(cuda, "// c = a + b, one thread per element"), "the C++ comment is not a comment"
        python = cells.nth(2).locator(".jp-InputArea .cm-content")
        expect(python).to_have_attribute("data-language", "python")
        cells.nth(1).scroll_into_view_if_needed()
        HIGHLIGHT.parent.mkdir(parents=True, exist_ok=True)
        cells.nth(1).locator(".jp-InputArea").screenshot(path=str(HIGHLIGHT))
        print(f"\nscreenshot: {HIGHLIGHT}")

        # Delete the magic line: the cell is Python again.
        cuda.locator(".cm-line").first.click()
        page.keyboard.press("Home")
        page.keyboard.press("Shift+End")
        page.keyboard.press("Delete")
        expect(cuda.locator(".cm-content")).to_have_attribute("data-language", "python", timeout=10_000)


LESSON_00 = ROOT / "notebooks" / "00_setup_and_hello.ipynb"
LESSON_SCREENSHOT = ROOT / "build_cache" / "screens" / "lesson00-nogpu.png"


def _lesson_cell(nb, starts: str) -> str:
    """The source of lesson 00's first code cell that starts with ``starts``."""
    return next(c.source for c in nb.cells if c.cell_type == "code" and c.source.startswith(starts))


def _lesson_notebook(folder) -> None:
    """A notebook of lesson 00's own cells in ``folder``: load jitlab, its `%%cuda hello_threads` cell, the
    call, then the same cell with the planted mistake made (the `;` after `printf(...)` deleted), last: Run
    All stops at the cell that fails."""
    import nbformat

    lesson = nbformat.read(LESSON_00, as_version=4)
    cell = _lesson_cell(lesson, "%%cuda hello_threads")
    planted = cell.replace("(int)blockDim.x);", "(int)blockDim.x)")
    assert planted != cell
    nb = nbformat.v4.new_notebook()
    # Every build shows its progress line (by default only one past 2 s: the emulator's build may be quicker).
    nb.cells = [nbformat.v4.new_code_cell(c) for c in ("%env JITLAB_PROGRESS_AFTER=0\n%load_ext jitlab", cell,
                                                         "hello_threads(grid=2, block=4)",
                                                         planted)]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, folder / "lesson00.ipynb")


@pytest.mark.slow
def test_lesson_00_on_a_cpu_runs_hello_threads_and_shows_the_planted_mistake_at_its_line(request):
    """Lesson 00 in JupyterLab without a GPU: `hello_threads` runs on the CPU emulator and prints each of its
    8 threads, and the planted mistake shows the compiler's error at the cell's line, not "no kernel found"."""
    _require_tools()
    from playwright.sync_api import expect

    _lesson_notebook(request.getfixturevalue("workdir"))
    lab, page = (request.getfixturevalue(f) for f in ("lab", "page"))
    with _screenshot_on_failure(page, lab):
        page.goto(lab.url("lab/tree/lesson00.ipynb"))
        cells = page.locator(".jp-Notebook .jp-CodeCell")
        cells.first.locator(".cm-content").wait_for(timeout=PANEL_S * 1000)
        lab.wait_kernel_idle("lesson00.ipynb", PANEL_S)
        page.get_by_role("menuitem", name="Run", exact=True).click()
        page.get_by_role("menuitem", name=re.compile(r"^Run All Cells")).click()
        expect(cells.nth(3).locator(".jp-OutputArea-output")).to_contain_text("error", timeout=PANEL_S * 1000)

        printed = sorted(ln for ln in cells.nth(2).locator(".jp-OutputArea").inner_text().splitlines()
                         if ln.startswith("block "))
        assert printed == sorted(f"block {b} of 2, thread {t} of 4" for b in range(2) for t in range(4)), printed
        built = cells.nth(1).locator(".jp-OutputArea").inner_text()
        assert "CPU emulator" in built and "(cpu emulator)" in built and ", )" not in built, built
        mistake = cells.nth(3).locator(".jp-OutputArea").inner_text()
        assert "cell line 6: error: expected" in mistake and "no __global__ kernel" not in mistake, mistake
        assert "Traceback" not in page.locator(".jp-Notebook").inner_text()

        LESSON_SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
        page.locator(".jp-Notebook").screenshot(path=str(LESSON_SCREENSHOT))
        print(f"\nscreenshot: {LESSON_SCREENSHOT}")
