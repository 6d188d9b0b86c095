"""The %%cuda / %%cpp cell magics and safe snippet saving, in a real IPython shell (CPU)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

import jitlab
from jitlab import config, snippets
from jitlab.jit import toolchain

PLANTED = Path(__file__).parent / "fixtures" / "planted" / "hello_threads.cu"
SCALE = "void scale(float* y, const float* x, int n) {\n  for (int i = 0; i < n; ++i) y[i] = %s * x[i];\n}\n"


def test_cpp_cell_is_saved_built_and_bound(ip, tmp_path, capsys):
    """The cell becomes kernels/NAME.cpp and the module is bound as NAME in the notebook."""
    ip.run_cell_magic("cpp", "scale", SCALE % "2.0f")
    assert (tmp_path / "kernels" / "scale.cpp").read_text() == SCALE % "2.0f"
    ip.run_cell("import torch; y = torch.empty(3); scale.scale(y, torch.ones(3), 3)")
    assert ip.user_ns["y"].tolist() == [2.0, 2.0, 2.0]
    assert "scale: built in" in capsys.readouterr().out


def test_previous_version_is_kept_in_history(ip, tmp_path):
    """Re-running the cell with an edit keeps the old text in kernels/.history/NAME/."""
    ip.run_cell_magic("cpp", "scale", SCALE % "2.0f")
    ip.run_cell_magic("cpp", "scale", SCALE % "3.0f")
    old = snippets.history(tmp_path / "kernels" / "scale.cpp")
    assert len(old) == 1 and old[0].read_text() == SCALE % "2.0f"
    assert (tmp_path / "kernels" / "scale.cpp").read_text() == SCALE % "3.0f"


def test_compile_error_uses_cell_line_numbers(ip, capsys):
    """An error on the body's line 2 is reported as the cell's line 3 (the magic is line 1), with a caret."""
    ip.run_cell_magic("cpp", "bad", "void f(int n) {\n  int k = undefined_name + n;\n}\n")
    out = capsys.readouterr().out
    assert "cell line 3: error:" in out and "undefined_name" in out
    lines = out.splitlines()
    i = next(k for k, line in enumerate(lines) if line.startswith("cell line 3"))
    assert lines[i + 1] == "      int k = undefined_name + n;"
    assert lines[i + 2].index("^") == lines[i + 1].index("undefined_name")
    assert "bad" not in ip.user_ns


def test_bad_magic_line_prints_help(ip, tmp_path, capsys):
    """A missing name or unknown option prints the usage, builds nothing."""
    ip.run_cell_magic("cuda", "", "__global__ void k() {}")
    assert "%%cuda NAME [options]" in capsys.readouterr().out
    ip.run_cell_magic("cuda", "k --turbo", "__global__ void k() {}")
    out = capsys.readouterr().out
    assert "unknown option --turbo" in out and "--compile-only" in out
    ip.run_cell_magic("cuda", "not-a-name", "__global__ void k() {}")
    assert "not a valid kernel name" in capsys.readouterr().out
    assert not (tmp_path / "kernels").exists()


def test_a_name_too_long_for_a_file_is_refused_naming_the_limit(ip, tmp_path, capsys):
    """A 300-character %%cpp or %%cuda name is refused naming the limit, nothing written (it was an OSError:
    File name too long from inside the save)."""
    for magic in ("cpp", "cuda"):
        ip.run_cell_magic(magic, "k" * 300, "int seven() { return 7; }\n")
        out = capsys.readouterr().out
        assert "is 300 characters: use at most 250" in out and "Traceback" not in out
    assert not (tmp_path / "kernels").exists() or not any((tmp_path / "kernels").iterdir())


def test_cuda_cell_compile_only_without_gpu(ip, tmp_path, capsys):
    """On a machine without a GPU a CUDA cell can be compile-checked for named archs, and shows each
    kernel's registers and shared/local memory per arch."""
    ip.run_cell_magic("cuda", "twice --compile-only --arch sm_75,sm_90",
                      "__global__ void twice(float* y, int n) { __shared__ float s[64]; int i = threadIdx.x; "
                      "s[i] = y[i]; if (i < n) y[i] = 2 * s[i]; }")
    out = capsys.readouterr().out
    assert "twice: compiled for sm_75, sm_90" in out
    assert re.search(r"twice \[sm_75\]: \d+ registers, 256 B shared, 0 B local", out), out
    assert "twice [sm_90]:" in out and (tmp_path / "kernels" / "twice.cu").is_file()


@pytest.mark.skipif(torch.cuda.is_available(), reason="the no-GPU path")
def test_compile_only_without_arch_and_without_a_gpu_takes_the_default_archs(ip, capsys):
    """`%%cuda NAME --compile-only` with no GPU to ask builds for config.DEFAULT_ARCHS instead of refusing."""
    ip.run_cell_magic("cuda", "once --compile-only", "__global__ void once(float* y) { y[0] = 1; }")
    out = capsys.readouterr().out
    assert f"once: compiled for {', '.join(config.DEFAULT_ARCHS)}" in out
    assert all(f"once [{arch}]:" in out for arch in config.DEFAULT_ARCHS)


def test_defines_reach_the_build(ip):
    """-D NAME=VALUE works like jitlab.load(defines=...)."""
    ip.run_cell_magic("cpp", "k -D F=5.0f", "void scale(float* y, const float* x, int n) { for (int i = 0; i < n; ++i) y[i] = F * x[i]; }")
    ip.run_cell("import torch; y = torch.empty(2); k.scale(y, torch.ones(2), 2)")
    assert ip.user_ns["y"].tolist() == [5.0, 5.0]


def test_atomic_save_leaves_no_temporary_files(tmp_path):
    """save() writes through a temporary file in the same folder and leaves only the snippet."""
    p = snippets.save(tmp_path / "k.cu", "__global__ void k() {}")
    snippets.save(p, "__global__ void k() { }")
    assert sorted(x.name for x in tmp_path.iterdir()) == [".history", "k.cu"]
    assert p.read_text().endswith("\n")


def test_check_option_without_reference_says_so(ip, capsys):
    """--check on a snippet with no NAME.ref.py binds the module and says what is missing."""
    ip.run_cell_magic("cpp", "lonely --check", SCALE % "2.0f")
    out = capsys.readouterr().out
    assert "cannot check lonely" in out and "lonely.ref.py" in out and "lonely" in ip.user_ns


def test_check_option_runs_the_reference(ip, tmp_path, capsys):
    """--check with kernels/NAME.ref.py prints the checker's table."""
    (tmp_path / "kernels").mkdir(exist_ok=True)
    (tmp_path / "kernels" / "twice.ref.py").write_text(
        "import torch\nSIZES = [1, 129]\n"
        "def inputs(size, seed, device):\n    return {'x': torch.randn(size)}\n"
        "def reference(inp):\n    return 2 * inp['x']\n"
        "def run(m, inp):\n    y = torch.empty_like(inp['x']); m.scale(y, inp['x'], y.numel()); return y\n")
    ip.run_cell_magic("cpp", "twice --check", SCALE % "2.0f")
    out = capsys.readouterr().out
    assert "twice" in out and "ok" in out and "verdict" in out


# ---- calling what the cell bound ----------------------------------------------------------------
TWO = "void a(float* y, int n) { y[0] = n; }\nint b(int n) { return 2 * n; }\n"


def test_one_function_cell_is_called_by_its_name(ip, capsys):
    """`%%cpp scale` with one function: `scale(...)` calls it; `scale.scale` and `scale.build` still work."""
    ip.run_cell_magic("cpp", "scale", SCALE % "2.0f")
    assert "call scale(...)" in capsys.readouterr().out
    ip.run_cell("import torch; y = torch.empty(3); scale(y, torch.ones(3), 3); z = torch.empty(3); "
                "scale.scale(z, torch.ones(3), 3); b = scale.build")
    assert ip.user_ns["y"].tolist() == ip.user_ns["z"].tolist() == [2.0, 2.0, 2.0]
    assert ip.user_ns["b"].cached is False and ip.user_ns["scale"].functions == ["scale"]


def test_one_function_of_another_name_is_called_too(ip, capsys):
    """`%%cpp k` whose only function is `scale`: `k(...)` calls `k.scale(...)`, and the cell says so."""
    ip.run_cell_magic("cpp", "k", SCALE % "3.0f")
    assert "call k(...) (that is k.scale(...))" in capsys.readouterr().out
    ip.run_cell("import torch; y = torch.empty(2); k(y, torch.ones(2), 2)")
    assert ip.user_ns["y"].tolist() == [3.0, 3.0]


def test_function_named_like_the_cell_is_the_one_called(ip, capsys):
    """`%%cpp b` with functions a and b: `b(...)` calls `b.b(...)`; `b.a` stays an attribute."""
    ip.run_cell_magic("cpp", "b", TWO)
    assert "call b(...); also b.a(...)" in capsys.readouterr().out
    ip.run_cell("r = b(4)")
    assert ip.user_ns["r"] == 8 and callable(ip.user_ns["b"].a)


def test_calling_an_ambiguous_module_names_the_functions(ip, capsys):
    """`%%cpp two` with functions a and b: `two(...)` raises an error that names `two.a` and `two.b`."""
    ip.run_cell_magic("cpp", "two", TWO)
    assert "call two.a(...), two.b(...)" in capsys.readouterr().out
    err = ip.run_cell("two(4)").error_in_exec
    assert isinstance(err, jitlab.ArgumentError) and isinstance(err, TypeError)
    assert "two.a(...), two.b(...)" in str(err)
    ip.run_cell("r = two.b(4)")
    assert ip.user_ns["r"] == 8


# ---- the magic line -----------------------------------------------------------------------------
def test_unknown_option_is_named_with_the_options(ip, capsys):
    """`%%cuda --bogus` names --bogus and lists the options, not argparse's "name is required"."""
    ip.run_cell_magic("cuda", "--bogus", "__global__ void k() {}")
    out = capsys.readouterr().out
    assert "unknown option --bogus" in out and "--compile-only" in out and "required" not in out


def test_misspelled_option_says_did_you_mean(ip, capsys):
    """A near miss names the option meant."""
    ip.run_cell_magic("cpp", "k --chek", SCALE % "2.0f")
    assert "unknown option --chek; did you mean --check?" in capsys.readouterr().out


def test_missing_name_is_explained_with_the_magics_usage(ip, capsys):
    """A cell without NAME says what NAME is and shows the usage line of the magic that was used."""
    ip.run_cell_magic("cpp", "--check", SCALE % "2.0f")
    out = capsys.readouterr().out
    assert "needs a NAME" in out and "kernels/NAME.cpp" in out and "%%cpp NAME [options]" in out


def test_a_second_name_is_not_taken_for_an_option(ip, capsys):
    """`%%cuda k sm_90` (a forgotten --arch) says that sm_90 is not an option."""
    ip.run_cell_magic("cuda", "k sm_90", "__global__ void k() {}")
    assert "one NAME only: 'k', then 'sm_90', which is not an option" in capsys.readouterr().out


def test_flag_value_starting_with_a_dash_names_the_spelling(ip, capsys):
    """`--flag -O3` (argparse takes -O3 for an option) suggests `--flag=-O3`."""
    ip.run_cell_magic("cpp", "k --flag -O3", SCALE % "2.0f")
    assert "--flag=-O3" in capsys.readouterr().out


def test_help_option_prints_the_help_only(ip, tmp_path, capsys):
    """`%%cuda --help` prints the help, no error, and saves nothing."""
    ip.run_cell_magic("cuda", "--help", "__global__ void k() {}")
    out = capsys.readouterr().out
    assert out.startswith("%%cuda NAME [options]") and "jitlab:" not in out
    assert not (tmp_path / "kernels").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="the no-GPU path")
def test_cuda_cell_without_a_gpu_suggests_the_magics_compile_only(ip, tmp_path, capsys):
    """Without a GPU, `%%cuda NAME --bench` of a kernel the CPU emulator does not run (inline PTX) saves the cell
    and says in one line what it does on a GPU, suggesting the same cell with `--compile-only`, not jitlab.build(...)."""
    ip.run_cell_magic("cuda", "twice --bench -D F=2", '__global__ void twice(float* y) { asm(""); y[0] *= F; }')
    out = capsys.readouterr().out
    assert out.startswith("needs a CUDA GPU") and out.count("\n") == 1 and "--bench runs it" in out
    assert "`%%cuda twice -D F=2 --compile-only`" in out and "jitlab.build" not in out
    assert (tmp_path / "kernels" / "twice.cu").is_file() and "twice" not in ip.user_ns


@pytest.mark.parametrize("magic, body, line", [  # nvcc names the `}` after the statement, GCC the statement
    ("cuda", '#include <cstdio>\n__global__ void hi() {\n    printf("hi %d\\n", threadIdx.x)\n}\n', 5),
    ("cpp", "void twice(float* y, int n) {\n    for (int i = 0; i < n; ++i) y[i] *= 2\n}\n", 3),
])
def test_a_missing_semicolon_is_the_compilers_error_at_the_cells_line(ip, capsys, magic, body, line):
    """The lesson's planted mistake (no `;` after the last statement) shows the compiler's error at the
    cell's line, not "no kernel found" where the parser stopped."""
    if magic == "cuda" and not toolchain.nvcc_path():
        pytest.skip("needs nvcc")
    ip.run_cell_magic(magic, f"semi_{magic} --compile-only --arch sm_75" if magic == "cuda" else f"semi_{magic}", body)
    out = capsys.readouterr().out
    assert f"cell line {line}: error:" in out and ";" in out and "no __global__ kernel" not in out, out


@pytest.mark.skipif(torch.cuda.is_available(), reason="the no-GPU path: --check runs on the CPU emulator")
def test_the_planted_mistake_with_check_is_the_emulators_compiler_at_the_cells_line(ip, capsys):
    """Lesson 00's planted mistake in a `%%cuda NAME --check` cell on a CPU machine: the emulator's compiler's
    error at the cell's line (the file's line 5, the cell's 6), not "no __global__ kernel found"."""
    body = PLANTED.read_text().split("\n", 2)[2]  # without the fixture's two comment lines
    ip.run_cell_magic("cuda", "hello_threads --check", body)
    out = capsys.readouterr().out
    assert "cell line 6: error: expected" in out and "no __global__ kernel" not in out, out
    assert "hello_threads" not in ip.user_ns


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="the no-GPU path: the CPU emulator by default")
def test_a_plain_cuda_cell_without_a_gpu_builds_and_runs_on_the_emulator(ip, capfd):
    """Lesson 00's plain `%%cuda hello_threads` cell on a CPU machine builds for the CPU emulator and binds the
    name, as on a GPU; calling it prints every thread's line."""
    body = PLANTED.read_text().split("\n", 2)[2].replace("(int)blockDim.x)", "(int)blockDim.x);")
    ip.run_cell_magic("cuda", "hello_threads", body)
    out = capfd.readouterr().out
    assert "hello_threads: built in" in out and "for the CPU emulator" in out and "needs a CUDA GPU" not in out, out
    ip.run_cell("hello_threads(grid=2, block=4)")
    printed = sorted(line for line in capfd.readouterr().out.splitlines() if line.startswith("block "))
    assert printed == sorted(f"block {b} of 2, thread {t} of 4" for b in range(2) for t in range(4))


@pytest.mark.skipif(torch.cuda.is_available(), reason="the no-GPU path")
def test_device_cuda_keeps_a_plain_cell_for_a_gpu(ip, capsys, tmp_path):
    """`%%cuda NAME --device cuda` without a GPU is saved, not built, in one line naming `--compile-only`."""
    ip.run_cell_magic("cuda", "once --device cuda", "__global__ void once(float* y) { y[0] = 1; }")
    out = capsys.readouterr().out
    assert out.startswith("needs a CUDA GPU") and "`%%cuda once --device cuda --compile-only`" in out, out
    assert (tmp_path / "kernels" / "once.cu").is_file() and "once" not in ip.user_ns


def test_help_in_a_cell_of_its_own(ip, capsys):
    """`%%cuda -h` alone in a cell names `%cuda`, and `%cuda -h` / `%cpp -h` print the help."""
    from IPython.core.error import UsageError

    with pytest.raises(UsageError, match="line magic %cuda"):
        ip.run_cell_magic("cuda", "-h", "")
    ip.run_line_magic("cuda", "-h")
    assert "%%cuda NAME [options]" in capsys.readouterr().out
    ip.run_line_magic("cpp", "saxpy")
    out = capsys.readouterr().out
    assert "`%%cpp saxpy` on its first line" in out and "%%cpp NAME [options]" in out


# ---- NAME: what it may bind ---------------------------------------------------------------------
def test_a_builtin_name_is_refused_and_nothing_saved(ip, tmp_path, capsys):
    """`%%cpp print` is refused (a Python builtin, --force named); no file is saved and print stays the builtin."""
    ip.run_cell_magic("cpp", "print", SCALE % "2.0f")
    out = capsys.readouterr().out
    assert "would rebind print, a Python builtin" in out and "--force" in out
    assert not (tmp_path / "kernels" / "print.cpp").exists() and "print" not in ip.user_ns


@pytest.mark.parametrize("cell, what", [("import torch", "the module torch"), ("torch = 5", "a value of type int")])
def test_a_name_the_notebook_bound_is_refused(ip, capsys, cell, what):
    """`%%cpp torch` after `import torch` (or any value jitlab did not make) is refused; torch stays bound."""
    ip.run_cell(cell)
    before = ip.user_ns["torch"]
    ip.run_cell_magic("cpp", "torch", SCALE % "2.0f")
    assert f"would rebind torch, bound in this notebook to {what}" in capsys.readouterr().out
    assert ip.user_ns["torch"] is before


def test_force_binds_over_a_builtin(ip, capsys):
    """`%%cpp len --force` binds the snippet as `len` in the notebook."""
    ip.run_cell_magic("cpp", "len --force", SCALE % "2.0f")
    assert isinstance(ip.user_ns["len"], jitlab.Module) and "len: built in" in capsys.readouterr().out


def test_a_name_the_magic_bound_may_be_bound_again(ip, capsys):
    """Re-running `%%cpp scale` rebinds scale (the magic's own module) to the edited build, no refusal."""
    ip.run_cell_magic("cpp", "scale", SCALE % "2.0f")
    first = ip.user_ns["scale"]
    ip.run_cell_magic("cpp", "scale", SCALE % "3.0f")
    assert "jitlab:" not in capsys.readouterr().out and ip.user_ns["scale"] is not first


def test_the_build_line_says_how_to_call_a_shadowed_function(ip, capsys):
    """A cell with functions `build` and `twice` prints `k['build'](...)`: `k.build` is the Build."""
    ip.run_cell_magic("cpp", "k", "int build(int x) { return x + 1; }\nint twice(int x) { return 2 * x; }\n")
    assert "call k['build'](...), k.twice(...)" in capsys.readouterr().out
    ip.run_cell("r = k['build'](1)")
    assert ip.user_ns["r"] == 2 and isinstance(ip.user_ns["k"].build, jitlab.Build)


def test_a_250_character_name_is_saved_built_and_bound(ip, tmp_path, capsys):
    """`%%cpp` with a 250-character NAME saves kernels/NAME.cpp, builds (the cache folder's name shortened) and binds it."""
    name = "s" * 250
    ip.run_cell_magic("cpp", name, SCALE % "2.0f")
    out = " ".join(capsys.readouterr().out.split())  # folded at words (jitlab.notebook.text)
    assert (tmp_path / "kernels" / f"{name}.cpp").is_file() and f"{name}: built in" in out
    assert len(ip.user_ns[name].build.folder.name) < 100
