"""The lesson notebooks and their exercises.

CPU (CI): every notebook is clean nbformat with the Colab cell first, it runs top to bottom with
nbclient, each GPU cell saying so in one line, every exercise has its cell, and every exercise's
starting code and solution compile. GPU (marker ``gpu``): every notebook runs whole, every solution passes its check and every
starting code fails it, as intended.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
from pathlib import Path

import nbformat
import pytest
import torch
from conftest import end_shell

import jitlab
from jitlab import snippets
from jitlab.jit import builder
from jitlab.judge import refs
from jitlab.notebook import exercises, nogpu
from jitlab.notebook import lessons as notebooks

ROOT = Path(__file__).resolve().parent.parent
KERNELS = ROOT / "kernels"
EXERCISES = KERNELS / "exercises"
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
LESSONS = ["00_setup_and_hello", "01_vector_add", "02_2d_indexing", "03_reduction", "04_torch_bindings",
           "05_inspect_and_debug", "06_matmul", "07_softmax_layernorm", "08_scan_histogram"]
#: Lessons with exercises (05 debugs the kernels of the others and has none of its own).
WITH_EXERCISES = [name for name in LESSONS if name != "05_inspect_and_debug"]
ALL = list(exercises.all_exercises().values())
TORCH_STYLE = {"vadd_checks"}  # compiles torch headers: tens of seconds on 2 cores
NOT_EMULATED = {"wmma_tile", *TORCH_STYLE}  # tensor cores; torch-style: the CPU emulator runs neither
# What only a GPU can run, whatever the snippet; such cells must carry the `gpu` tag (and so must a cell that
# loads, or is, a CUDA snippet the CPU emulator cannot run: see needs_a_gpu).
NEEDS_GPU = re.compile(r'device="cuda"|torch\.cuda\.(?!is_available\(\))|\.cuda\(\)')
LOAD = re.compile(r'jitlab\.load\(([^,)]*)')
CUDA_CELL = re.compile(r"%%cuda (\S+)(.*)\n")


@pytest.fixture(autouse=True)
def session_cache(shared_cache, monkeypatch):
    """One build cache for this module's tests (and the notebook kernels they start), unless set."""
    import os

    if not os.environ.get("JITLAB_CACHE_DIR"):
        monkeypatch.setenv("JITLAB_CACHE_DIR", str(shared_cache))


def _nb(path: Path):
    return nbformat.read(path, as_version=4)


def _ids(items):
    return [getattr(i, "stem", getattr(i, "name", str(i))) for i in items]


def _digest(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and "__pycache__" not in p.parts}


# ---- the notebooks as files -------------------------------------------------------------------
def test_the_lessons_are_there():
    """notebooks/ holds lessons 00-08."""
    names = {p.stem for p in NOTEBOOKS}
    assert set(LESSONS) <= names, sorted(set(LESSONS) - names)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_notebook_is_valid_and_committed_without_outputs(path):
    """Valid nbformat, no outputs and no execution counts."""
    nb = _nb(path)
    nbformat.validate(nb)
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            assert cell.outputs == [], f"cell {i} has outputs"
            assert cell.execution_count is None, f"cell {i} has an execution count"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_first_cell_is_the_colab_bootstrap(path):
    """The first cell detects Colab, names the repository once, and finds kernels/ from notebooks/."""
    first = _nb(path).cells[0]
    assert first.cell_type == "code" and not notebooks.is_gpu_cell(first)
    src = first.source
    assert '"google.colab" in sys.modules' in src
    assert src.count("JITLAB_REPO = ") == 1 and 'JITLAB_REPO = "https://github.com/jitlab-dev/jitlab"' in src
    assert "github.com" not in src.replace('"https://github.com/jitlab-dev/jitlab"', "")
    assert 'os.chdir("..")' in src and "print_environment()" in src


def needs_a_gpu(source: str, folder: Path) -> bool:
    """Whether a cell needs a GPU on a machine without one: it touches CUDA tensors, loads a CUDA snippet the
    CPU emulator cannot run (or one it cannot tell), or is a `%%cuda` cell the emulator does not take (a
    program, torch-style, refused, `--device cuda`); `--exercise` and `--compile-only` cells never do.
    ``folder`` holds the notebook's `%%cuda` cells as `kernels/NAME.cu` (:func:`saved_cells`)."""
    from jitlab.jit import emulator_support
    from jitlab.jit.sources import is_program

    if NEEDS_GPU.search(source):
        return True
    for arg in LOAD.findall(source):
        literal = re.fullmatch(r'\s*"([^"]+)"\s*', arg)
        if literal is None:
            return True  # cannot tell
        path = folder / literal[1] if (folder / literal[1]).exists() else ROOT / literal[1]
        if not literal[1].endswith(".cpp") and emulator_support.cannot_run(path):
            return True
    cell = CUDA_CELL.match(source)
    if cell is None or re.search(r"--(exercise|compile-only)", cell[2]):
        return False
    snippet = folder / "kernels" / f"{cell[1]}.cu"
    return "--device cuda" in cell[2] or is_program(snippet) or bool(emulator_support.cannot_run(snippet))


def saved_cells(nb, folder: Path) -> Path:
    """Each `%%cuda NAME` cell of ``nb`` saved as ``folder/kernels/NAME.cu``, as running it would; returns ``folder``."""
    (folder / "kernels").mkdir(parents=True, exist_ok=True)
    for c in nb.cells:
        cell = CUDA_CELL.match(c.source) if c.cell_type == "code" else None
        if cell:
            (folder / "kernels" / f"{cell[1]}.cu").write_text(c.source.split("\n", 1)[1])
    return folder


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_cells_that_need_a_gpu_are_tagged(path, tmp_path):
    """A cell that needs a GPU (CUDA tensors, a CUDA snippet the CPU emulator cannot run) carries the `gpu` tag."""
    nb = _nb(path)
    folder = saved_cells(nb, tmp_path)
    untagged = [c.source.splitlines()[0] for c in nb.cells
                if c.cell_type == "code" and not notebooks.is_gpu_cell(c) and needs_a_gpu(c.source, folder)]
    assert not untagged, untagged


@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_cells_the_cpu_emulator_runs_are_not_tagged(path, tmp_path):
    """A `gpu` tag is only where a GPU is needed: a kernel-only `%%cuda` cell the CPU emulator runs has none."""
    nb = _nb(path)
    folder = saved_cells(nb, tmp_path)
    tagged = [c.source.splitlines()[0] for c in nb.cells
              if c.cell_type == "code" and notebooks.is_gpu_cell(c) and CUDA_CELL.match(c.source)
              and not needs_a_gpu(c.source, folder)]
    assert not tagged, tagged


# ---- exercises ----------------------------------------------------------------------------------
def test_there_are_at_least_25_exercises_across_the_lessons():
    """At least 25 exercises, at least 4 in each of lessons 06-08, every lesson with exercises has
    one, and each names a lesson that exists."""
    assert len(ALL) >= 25
    for lesson in ("06_matmul", "07_softmax_layernorm", "08_scan_histogram"):
        assert sum(e.lesson == lesson for e in ALL) >= 4, lesson
    assert {e.lesson for e in ALL} == set(WITH_EXERCISES)


@pytest.mark.parametrize("ex", ALL, ids=_ids(ALL))
def test_exercise_is_complete(ex):
    """Title, hint, sizes and the .ref.py functions; a solution that differs from the start."""
    ref = refs.load(ex.ref)
    assert ex.title and ex.hint and list(ref.SIZES)
    assert all(callable(getattr(ref, f)) for f in ("inputs", "reference", "run"))
    assert ex.path.is_file() and ex.solution.is_file()
    assert "TODO" in ex.path.read_text()
    assert ex.solution.read_text() != ex.path.read_text()


@pytest.mark.parametrize("ex", ALL, ids=_ids(ALL))
def test_a_failing_check_nudges_first_and_gives_the_fix_after(ex):
    """The first failing check of an exercise shows its nudge (a question, not the fix) and says a closer hint
    comes; a later one shows the hint and where the solution is."""
    assert ex.nudge and ex.nudge != ex.hint and ex.nudge.rstrip().endswith(("?", "."))
    first, again = (str(exercises.Result(ex, ex.path, "fail", attempt=n)) for n in (1, 2))
    assert f"Hint: {ex.nudge}" in first and ex.hint not in first and "solution(" not in first
    assert "closer hint" in first
    assert f"Hint: {ex.hint}" in again and ex.nudge not in again and f'solution("{ex.name}")' in again


@pytest.mark.parametrize("ex", ALL, ids=_ids(ALL))
def test_exercise_cell_holds_the_starting_code(ex):
    """The lesson has a `%%cuda NAME --exercise` cell (not GPU-only) whose body is the starting code."""
    cells = [c for c in _nb(ROOT / "notebooks" / f"{ex.lesson}.ipynb").cells
             if c.cell_type == "code" and c.source.startswith(f"%%cuda {ex.name} --exercise\n")]
    assert len(cells) == 1
    assert not notebooks.is_gpu_cell(cells[0])
    assert cells[0].source.split("\n", 1)[1] + "\n" == ex.path.read_text()


def test_exercises_stay_out_of_the_demo():
    """`jitlab run` (kernels/*.ref.py) finds none of the exercises."""
    found = refs.find_kernels(KERNELS)
    assert not {k.name for k in found} & {e.name for e in ALL}
    assert not any(EXERCISES in k.ref.parents for k in found)


def test_list_keeps_its_columns_apart():
    """Every row of exercises.list() has at least two spaces between lesson, name and title (the
    longest lesson name, 07_softmax_layernorm, ran into the name)."""
    for row in str(exercises.list()).splitlines()[1:]:
        ex = next(e for e in ALL if row.startswith(e.lesson) and f" {e.name} " in row)
        assert row.startswith(ex.lesson + "  ") and f"  {ex.name}  " in row, row


def test_list_shows_lesson_and_title():
    """exercises.list() prints one row per exercise, in lesson order."""
    text = str(exercises.list())
    assert all(e.name in text and e.title in text for e in ALL)
    assert [e.lesson for e in exercises.list()] == sorted(e.lesson for e in ALL)
    assert [e.name for e in exercises.list("03_reduction")] == [e.name for e in ALL if e.lesson == "03_reduction"]


def test_jitlab_exercises_is_a_lazy_attribute():
    """`jitlab.notebook.exercises` works after a plain `import jitlab`."""
    assert jitlab.notebook.exercises is exercises


def test_unknown_exercise_names_the_closest():
    """A misspelled name raises SnippetError with the nearest names."""
    with pytest.raises(jitlab.SnippetError, match="did you mean vadd_bounds"):
        exercises.check("vadd_bound")


def test_solution_prints_the_solution_file(capsys):
    """exercises.solution(NAME) prints solutions/NAME.cu."""
    exercises.solution("vadd_bounds")
    assert (EXERCISES / "solutions" / "vadd_bounds.cu").read_text() in capsys.readouterr().out


def _compile_cases():
    out = []
    for ex in ALL:
        marks = [pytest.mark.slow] if ex.name in TORCH_STYLE else []
        out += [pytest.param(ex.path, id=f"{ex.name}-start", marks=marks),
                pytest.param(ex.solution, id=f"{ex.name}-solution", marks=marks)]
    return out


@pytest.mark.parametrize("path", _compile_cases())
def test_exercise_compiles_for_the_t4(path):
    """Starting code and solution compile for sm_75 (compile-only: no GPU needed)."""
    b = jitlab.build(path, compile_only=True, arch=["sm_75"])
    assert b.resources


@pytest.mark.skipif(torch.cuda.is_available(), reason="the no-GPU path")
def test_check_without_a_gpu_says_so_and_compiles():
    """Without a GPU, check() of what the CPU emulator cannot run (tensor cores) says it needs one,
    names why, compiles for sm_75 instead, and does not raise."""
    r = exercises.check("wmma_tile")
    assert r.status == "needs a GPU" and not r
    assert "no CUDA GPU" in str(r) and "tensor cores" in str(r) and "it compiles" in str(r) and "sm_75" in str(r)


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="the no-GPU path")
def test_check_without_a_gpu_runs_on_the_cpu_emulator():
    """Without a GPU, check() runs a kernel-only exercise on the CPU emulator: the starting code fails,
    the solution passes, and both say where they ran and why there is no timing."""
    start, solved = exercises.check("vadd_bounds"), exercises.check("vadd_bounds", exercises.get("vadd_bounds").solution)
    assert start.status == "fail" and solved.status == "pass"
    assert all("run on the CPU emulator" in str(r) and "no timing" in str(r) for r in (start, solved))
    ex = exercises.get("vadd_bounds")
    assert f"Hint: {ex.nudge if start.attempt == 1 else ex.hint}" in str(start) and "Hint" not in str(solved)


def test_compile_error_shows_the_compiler_message(tmp_path):
    """A broken version is a COMPILE ERROR result with the file, line and message."""
    bad = tmp_path / "vadd_bounds.cu"
    bad.write_text("__global__ void vadd_bounds(float* c, int n) {\n    c[0] = undefined_name;\n}\n")
    r = exercises.compile("vadd_bounds", bad)
    assert r.status == "compile error" and not r
    assert f"{bad}:2" in str(r) and "undefined_name" in str(r)
    if not torch.cuda.is_available():
        assert exercises.check("vadd_bounds", bad).status == "compile error"


# ---- the %%cuda --exercise cell -----------------------------------------------------------------
@pytest.fixture
def ip(tmp_path, monkeypatch):
    """An IPython shell with jitlab loaded, working in a copy of kernels/exercises."""
    from IPython.core.interactiveshell import InteractiveShell

    shutil.copytree(EXERCISES, tmp_path / "kernels" / "exercises")
    monkeypatch.chdir(tmp_path)
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "jitlab")
    yield shell
    end_shell()


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="the no-GPU path")
def test_exercise_cell_saves_and_checks(ip, tmp_path, capsys):
    """The cell is saved over kernels/exercises/NAME.cu (old text kept in .history) and checked."""
    target = tmp_path / "kernels" / "exercises" / "vadd_index.cu"
    start = target.read_text()
    ip.run_cell_magic("cuda", "vadd_index --exercise", start.rstrip("\n"))
    assert "FAIL" in (out := capsys.readouterr().out) and "run on the CPU emulator" in out
    assert target.read_text() == start and not (target.parent / ".history").exists()
    fixed = start.replace("blockIdx.x * gridDim.x", "blockIdx.x * blockDim.x")
    ip.run_cell_magic("cuda", "vadd_index --exercise", fixed)
    assert target.read_text() == fixed
    assert [p.read_text() for p in snippets.history(target)] == [start]


def test_exercise_cell_compile_error_uses_cell_lines(ip, capsys):
    """A compile error in an exercise cell is shown with the cell's line numbers."""
    ip.run_cell_magic("cuda", "vadd_bounds --exercise",
                      "__global__ void vadd_bounds(float* c, int n) {\n    c[0] = undefined_name;\n}")
    out = capsys.readouterr().out
    assert "COMPILE ERROR" in out and "cell line 3: error:" in out and "undefined_name" in out


def test_exercise_cell_with_an_unknown_name_saves_nothing(ip, tmp_path, capsys):
    """`%%cuda nope --exercise` says which exercises exist and writes no file."""
    ip.run_cell_magic("cuda", "nope --exercise", "__global__ void nope() {}")
    assert "no exercise 'nope'" in capsys.readouterr().out
    assert not (tmp_path / "kernels" / "exercises" / "nope.cu").exists()


# ---- running notebooks --------------------------------------------------------------------------
@pytest.mark.slow
def test_c_printf_reaches_the_notebook_cell(tmp_path, monkeypatch):
    """printf from a snippet lands in the cell's output, not the kernel's terminal (ipykernel 7 routes
    writes to cells by thread context; CUDA's device printf takes the same path)."""
    from nbformat.v4 import new_code_cell, new_notebook

    monkeypatch.delenv("PYTEST_CURRENT_TEST")  # ipykernel watches fd 1 only outside pytest: as for users

    snippet = tmp_path / "hi.cpp"
    snippet.write_text('#include <cstdio>\nvoid hi(int n) { for (int i = 0; i < n; ++i) printf("hi %d\\n", i); }\n')
    nb = new_notebook(cells=[new_code_cell(f"import jitlab\njitlab.load({str(snippet)!r}).hi(3)\nprint('after')")])
    (tmp_path / "notebooks").mkdir()
    path = tmp_path / "notebooks" / "printf.ipynb"
    nbformat.write(nb, path)
    run = notebooks.run_notebook(path, tmp_path / "work", gpu=False, kernels=EXERCISES)
    text = "".join(o.get("text", "") for o in run.notebook.cells[0].outputs)
    assert text == "hi 0\nhi 1\nhi 2\nafter\n"


def test_jitlabs_notes_are_plain_cell_text_not_an_error_box(tmp_path):
    """In a Jupyter kernel jitlab's notes and a slow step's lines go to stdout: front ends paint stderr as an
    error, and a build that went well is not one."""
    from nbformat.v4 import new_code_cell, new_notebook

    code = ("import time\nfrom jitlab import progress\nprogress.say('jitlab: a note')\n"
            "with progress.Step('waiting', after=0):\n    time.sleep(0.3)")
    nb = new_notebook(cells=[new_code_cell(code)])
    (tmp_path / "notebooks").mkdir()
    path = tmp_path / "notebooks" / "notes.ipynb"
    nbformat.write(nb, path)
    outputs = notebooks.run_notebook(path, tmp_path / "work", gpu=False, kernels=EXERCISES).notebook.cells[0].outputs
    streams = [o for o in outputs if o["output_type"] == "stream"]
    assert "jitlab: a note" in "".join(o["text"] for o in streams if o["name"] == "stdout"), outputs
    assert not [o for o in streams if o["name"] == "stderr"], outputs


def test_cell_text_is_what_a_front_end_shows():
    """A closed progress widget shows nothing (its text/plain is a stand-in) and a carriage return
    overwrites its line, as in a terminal: a slow build's progress is not counted as a cell's output."""
    widget = {"output_type": "display_data",
              "data": {"text/plain": "building a.cu … 2.1 s", notebooks.WIDGET_MIME: {"model_id": "x"}}}
    stream = {"output_type": "stream", "name": "stderr",
              "text": "building a.cu 0.5 s\rbuilding a.cu 1.0 s\rjitlab: built\nnext line\r\n"}
    plain = {"output_type": "execute_result", "data": {"text/plain": "42"}}
    assert notebooks.cell_text({"outputs": [widget, stream, plain]}) == "jitlab: built 1.0 s\nnext line\n42"


@pytest.mark.slow
def test_run_notebook_leaves_gpu_cells_out_and_names_the_failing_cell(tmp_path):
    """Without a GPU the gpu-tagged cells are dropped; a failing cell is reported with its id and error."""
    from nbformat.v4 import new_code_cell, new_notebook

    nb = new_notebook(cells=[new_code_cell("import jitlab, os; here = os.getcwd()", id="first"),
                             new_code_cell("raise RuntimeError('needs a GPU')", id="gpu-only",
                                           metadata={"tags": ["gpu"]}),
                             new_code_cell("assert here.endswith('notebooks')", id="third")])
    (tmp_path / "notebooks").mkdir()
    path = tmp_path / "notebooks" / "t.ipynb"
    nbformat.write(nb, path)
    run = notebooks.run_notebook(path, tmp_path / "work", gpu=False, kernels=EXERCISES)
    assert (run.ran, run.skipped) == (2, 1)
    nb.cells.append(new_code_cell("1 / 0", id="boom"))
    nbformat.write(nb, path)
    with pytest.raises(notebooks.NotebookError, match=r"cell 2 \(id boom\) failed with ZeroDivisionError"):
        notebooks.run_notebook(path, tmp_path / "work2", gpu=False, kernels=EXERCISES)


def _left_in_a_clone(ran: Path) -> list[str]:
    """What a lesson run in ``ran`` (its copy of kernels/) would show in a clone's ``git status``: a tracked
    file it changed, or a new file kernels/.gitignore does not name."""
    tracked = set(subprocess.run(["git", "ls-files", "kernels"], cwd=ROOT, capture_output=True, text=True,
                                 check=True).stdout.splitlines())
    left = []
    for f in sorted(p for p in ran.rglob("*") if p.is_file()):
        rel = f"kernels/{f.relative_to(ran).as_posix()}"
        if rel in tracked:
            if f.read_bytes() != (ROOT / rel).read_bytes():
                left.append(f"changed {rel}")
        elif not (ROOT / rel).exists():  # new in this run (an untracked file of the checkout was copied in)
            ignored = subprocess.run(["git", "check-ignore", "-q", "--no-index", rel], cwd=ROOT).returncode == 0
            if not ignored:
                left.append(f"new {rel}")
    return left


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="the GPU test runs these notebooks whole")
@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_notebook_runs_top_to_bottom_without_a_gpu(path, tmp_path, monkeypatch):
    """Every cell runs in order with nbclient, in a copy (kernels/ is left as it was), with no traceback
    anywhere: each gpu-tagged cell prints exactly one line, that it needs a GPU, and no other cell does.
    Every build shows its progress (as a slow machine's would), so progress is never taken for output."""
    monkeypatch.setenv("JITLAB_PROGRESS_AFTER", "0")
    before = _digest(KERNELS)
    run = notebooks.run_notebook(path, tmp_path / "work")
    assert run.ran > 1 and run.skipped == 0
    assert _digest(KERNELS) == before
    assert _left_in_a_clone(tmp_path / "work" / "kernels") == []
    cells = [c for c in run.notebook.cells if c.cell_type == "code"]
    for c in cells:
        text = notebooks.cell_text(c)
        assert not any(o.output_type == "error" for o in c.outputs) and "Traceback" not in text, (c.source, text)
        if notebooks.is_gpu_cell(c):
            lines = [line for line in text.splitlines()  # less progress lines, what a closed bar left, and the
                     if line.strip() and not line.startswith(("jitlab: building ", "jitlab: built "))  # line saying
                     and line != builder.ON_THE_EMULATOR]  # once that kernel-only loads go to the CPU emulator
            assert len(lines) == 1 and lines[0].startswith(nogpu.PREFIX), (c.source, text)
        else:
            assert nogpu.PREFIX not in text, (c.source, text)
    assert len(run.needed_gpu) == sum(map(notebooks.is_gpu_cell, cells))
    outputs = "".join(map(notebooks.cell_text, cells))
    for ex in ALL:  # the CPU emulator runs every exercise but those on tensor cores and the torch-style ones
        if ex.lesson == path.stem:
            assert f"{'NEEDS A GPU' if ex.name in NOT_EMULATED else ''} · {ex.name}: {ex.title}" in outputs


# ---- on a GPU -------------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("path", NOTEBOOKS, ids=_ids(NOTEBOOKS))
def test_notebook_runs_top_to_bottom_on_a_gpu(path, tmp_path):
    """Every cell, gpu-tagged ones included, runs without an error (exercise cells print FAIL, not raise)."""
    before = _digest(KERNELS)
    run = notebooks.run_notebook(path, tmp_path / "work", gpu=True)
    assert run.skipped == 0
    assert _digest(KERNELS) == before


@pytest.mark.gpu
@pytest.mark.parametrize("ex", ALL, ids=_ids(ALL))
def test_solution_passes(ex):
    """The reference solution passes the exercise's check."""
    r = exercises.check(ex.name, path=ex.solution)
    assert r.status == "pass", str(r)


@pytest.mark.gpu
@pytest.mark.parametrize("ex", ALL, ids=_ids(ALL))
def test_starting_code_fails(ex):
    """The starting code compiles and runs but fails the check, with the hint shown."""
    r = exercises.check(ex.name)
    assert r.status == "fail", str(r)
    assert "Hint:" in str(r)
