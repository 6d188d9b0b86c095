"""torch's meaning of load_inline's flag lists, TORCH_CUDA_ARCH_LIST and the other keywords, without a shell
(jit/shellwords.py, jit/torch_compat.py): C++ built and run on the CPU, CUDA compile-only with the binary read."""

from __future__ import annotations

import subprocess

import pytest
import torch

import jitlab
from jitlab.jit import shellwords, toolchain, torch_compat

# ---- splitting an entry as the shell under torch's ninja would --------------------------------------


@pytest.mark.parametrize("entry, expected", [
    ("", []),
    ("   ", []),
    ("-O3 -Wall", ["-O3", "-Wall"]),
    ("-O3 -Xptxas -O3 -Xcompiler -O3", ["-O3", "-Xptxas", "-O3", "-Xcompiler", "-O3"]),
    ("\t-DA=1\t -DB=2 ", ["-DA=1", "-DB=2"]),
    ('-DMSG="two words"', ["-DMSG=two words"]),
    ("-DMSG='a;b|c $x'", ["-DMSG=a;b|c $x"]),
    ('-DQ="say \\"hi\\""', ['-DQ=say "hi"']),
    ("-DP=a\\ b", ["-DP=a b"]),
    ('""', [""]),
    ("-g\n\n", ["-g"]),
])
def test_an_entry_is_split_into_the_words_a_shell_makes(entry, expected):
    """Each flag entry becomes the arguments /bin/sh would make of it: blanks split, quotes and backslashes honoured."""
    assert shellwords.words(entry) == expected


def test_a_leading_tilde_is_the_home_folder_unless_quoted(monkeypatch):
    """An unquoted leading ``~`` is the home folder, as in the shell; a quoted one stays text."""
    monkeypatch.setenv("HOME", "/home/learner")
    assert shellwords.words("-isystem ~/inc '~/lit' -I~/x") == ["-isystem", "/home/learner/inc", "~/lit", "-I~/x"]


@pytest.mark.parametrize("entry, named", [
    ("-O3; rm -rf build", "';'"),
    ("-DUSER=$(whoami)", "'$'"),
    ("-DV=`id -u`", "'`'"),
    ("-O3 > flags.txt", "'>'"),
    ("-O3 | tee log", "'|'"),
    ('-DHOME_DIR="$HOME"', "'$'"),
    ("-O3 &", "'&'"),
    ("#-O3", "'#'"),
    ("-O3\n-Wall", "a line break"),
])
def test_a_word_only_a_shell_would_act_on_is_refused_by_name(entry, named):
    """``;``, ``$(...)``, backquotes, redirections and the like are refused, the message naming the character."""
    with pytest.raises(jitlab.FlagError) as e:  # an ArgumentError, and a RuntimeError as torch's failed build
        shellwords.flag_list([entry], "extra_cflags")
    assert isinstance(e.value, jitlab.ArgumentError) and isinstance(e.value, RuntimeError)
    assert named in str(e.value) and "extra_cflags=" in str(e.value) and "without a shell" in str(e.value)


def test_an_unclosed_quote_is_refused():
    """A quote that is never closed is an error that says which quote."""
    with pytest.raises(jitlab.ArgumentError, match="the \" quote is never closed"):
        shellwords.words('-DMSG="open')


def test_a_flag_list_takes_a_string_or_a_list_and_drops_empty_entries():
    """A flag keyword may be one string or a list; empty entries give no argument (KernelBench passes ``['']``)."""
    assert shellwords.flag_list("-O2 -g", "extra_cflags") == ["-O2", "-g"]
    assert shellwords.flag_list(["", "-O3 -Wall", ""], "extra_cflags") == ["-O3", "-Wall"]
    assert shellwords.flag_list(None, "extra_ldflags") == []
    with pytest.raises(jitlab.ArgumentError, match="takes strings"):
        shellwords.flag_list([3], "extra_ldflags")


def test_torch_options_split_each_keyword_and_keep_include_paths_whole(tmp_path):
    """torch_options splits cflags, nvcc flags and linker flags, and keeps a folder with spaces and quotes one path."""
    odd = tmp_path / "my headers 'v2'"
    opts = torch_compat.torch_options(["", "-O3 -Wall"], ["-O3 -Xptxas -O3"], [""], [f"  {odd}  "])
    assert opts.cflags == ["-O3", "-Wall", f"-I{odd}"]
    assert opts.cuda_cflags == ["-O3", "-Xptxas", "-O3", f"-I{odd}"]
    assert opts.ldflags == []


# ---- TORCH_CUDA_ARCH_LIST ----------------------------------------------------------------------------


@pytest.mark.parametrize("value, archs", [
    ("8.0", ["sm_80"]),
    ("7.5;8.6+PTX", ["sm_75", "sm_86", "compute_86"]),
    ("8.0 9.0", ["sm_80", "sm_90"]),
    ("Volta;Hopper", ["sm_70", "compute_70", "sm_90", "compute_90"]),
    ("Ampere", ["sm_80", "sm_86", "compute_86"]),
    ("9.0a", ["sm_90a"]),
    ("native", None),
    ("", None),
])
def test_torch_cuda_arch_list_reads_as_torch_reads_it(value, archs):
    """Versions, ``+PTX``, names like ``Volta`` and ``;`` or space separators give torch's architectures."""
    assert shellwords.torch_arch_list(value) == archs


def test_an_unknown_arch_in_the_list_names_the_forms():
    """An entry that is neither a version nor a name is refused with the forms the variable takes."""
    with pytest.raises(jitlab.ArgumentError, match="'Hoper' is not an architecture.*Hopper"):
        shellwords.torch_arch_list("8.0;Hoper")


def test_the_variable_chooses_the_archs_unless_the_call_names_them(monkeypatch):
    """TORCH_CUDA_ARCH_LIST sets the options' archs when the call gives none, and never over a given arch."""
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "7.5 9.0+PTX")
    assert torch_compat.torch_options().arch == ["sm_75", "sm_90", "compute_90"]
    assert torch_compat.torch_options(base=jitlab.jit.flags.Options(arch=["sm_80"])).arch == ["sm_80"]


# ---- built: C++ on the CPU ----------------------------------------------------------------------------

GREET = """
#include "shout.h"
std::string greet() { return std::string(GREETING) + SUFFIX; }
torch::Tensor scaled(torch::Tensor x) { return x * FACTOR; }
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """One C++ load_inline built with torch-style flag lists, a quoted include folder and docstrings."""
    root = tmp_path_factory.mktemp("flags")
    inc = root / "include dir 'quoted'"
    inc.mkdir()
    (inc / "shout.h").write_text('#define SUFFIX "!"\n')
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("JITLAB_CACHE_DIR", str(root / "cache"))
        mod = jitlab.load_inline(
            name="flag_meanings", cpp_sources=GREET,
            functions={"greet": "Say hello.", "scaled": "x times FACTOR"},
            extra_cflags=["", "-Wall -Wextra", "-DGREETING='\"hello there\"'", "-DFACTOR=3"],
            extra_ldflags=[""], extra_include_paths=[str(inc)], verbose=True)
    return mod


@pytest.mark.slow
def test_flag_lists_mean_what_they_mean_to_torch(built):
    """Empty entries, several flags in one string (warnings: an -O level would make a header set of its own,
    ~1 min of this suite) and a quoted define build and run as with torch's load_inline."""
    assert built.greet() == "hello there!"
    assert built.scaled(torch.ones(2)).tolist() == [3.0, 3.0]


@pytest.mark.slow
def test_docstrings_are_where_torch_puts_them(built):
    """``functions=`` as a dict gives each bound function its docstring, first in its __doc__ as pybind11 puts it."""
    assert built.greet.__doc__.strip().endswith("Say hello.")
    assert "x times FACTOR" in built.scaled.__doc__


@pytest.mark.slow
def test_verbose_shows_the_compiler_commands(built, capfd):
    """verbose=True prints the compiler's command lines, the split flags as separate arguments."""
    torch_compat.show_log(built.build)
    err = capfd.readouterr().err
    command = next(line for line in err.splitlines() if " -c " in line and "flag_meanings.cpp" in line)
    assert " -Wall -Wextra " in command and "'-DGREETING=\"hello there\"'" in command


@pytest.mark.slow
def test_a_rejected_flag_is_named_in_the_first_line(cache):
    """A flag the compiler rejects is named on the error's first line, never only "the build failed"."""
    with pytest.raises(jitlab.CompileError) as e:
        jitlab.load_inline(name="bad_flag", cpp_sources="torch::Tensor f(torch::Tensor x) { return x; }",
                           functions=["f"], extra_cflags=["-O2 -fno-such-jitlab-option"])
    first = str(e.value).splitlines()[0]
    assert "failed to compile" in first and "-fno-such-jitlab-option" in first


def test_a_shell_word_is_refused_before_anything_is_written(cache):
    """A flag with ``$(...)`` is refused at the call, before any source is written or compiled."""
    with pytest.raises(jitlab.ArgumentError, match="'\\$'"):
        jitlab.load_inline(name="shell_word", cpp_sources="int x;", extra_cflags=["-DX=$(id)"])
    assert not (cache / "inline" / "shell_word").exists()


@pytest.mark.slow
def test_a_library_not_a_module_returns_its_path(cache):
    """is_python_module=False loads the library (its operators in torch.ops) and returns its path, as torch's."""
    src = """
torch::Tensor thrice(torch::Tensor x) { return x * 3; }
TORCH_LIBRARY(jitlab_flags_test, m) { m.def("thrice(Tensor x) -> Tensor"); }
TORCH_LIBRARY_IMPL(jitlab_flags_test, CPU, m) { m.impl("thrice", &thrice); }
"""
    path = jitlab.load_inline(name="lib_only", cpp_sources=src, is_python_module=False, extra_cflags=[""])
    assert isinstance(path, str) and path.endswith(".so")
    assert torch.ops.jitlab_flags_test.thrice(torch.ones(1)).tolist() == [3.0]


# ---- CUDA, compile-only: the architectures in the binary -----------------------------------------------

LAUNCHER = """
__global__ void add_one(float* x, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] += 1.0f; }
void launch_add_one(float* x, int n) { add_one<<<(n + 255) / 256, 256>>>(x, n); }
"""
HOST = """#include <torch/extension.h>
void launch_add_one(float* x, int n);
torch::Tensor add_one(torch::Tensor x) { launch_add_one(x.data_ptr<float>(), x.numel()); return x; }
"""


def _contents(artifact) -> set[str]:
    """The cubins' and PTX's architectures in an object, as cuobjdump lists them (``sm_75``, ``ptx:sm_90``)."""
    tool = toolchain.find_cuda_tool("cuobjdump")
    assert tool, "cuobjdump: pip install nvidia-cuda-cuobjdump (a test dependency)"
    out = subprocess.run([tool, "-lelf", "-lptx", str(artifact)], capture_output=True, text=True, check=True).stdout
    return {("ptx:" if line.startswith("PTX") else "") + line.rsplit(".", 2)[-2] for line in out.splitlines() if ": " in line}


@pytest.mark.slow
def test_torch_cuda_arch_list_chooses_the_binarys_architectures(use_shared_cache, monkeypatch):
    """TORCH_CUDA_ARCH_LIST="7.5;Hopper" compiles SASS for sm_75 and sm_90 and PTX for compute_90, no more;
    the lecture's one-string nvcc flags and an empty entry build alongside."""
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "7.5;Hopper")
    b = torch_compat.build_inline("arch_list", cpp_sources=HOST, cuda_sources=LAUNCHER, compile_only=True,
                                  no_implicit_headers=True, extra_cuda_cflags=["-O3 -Xptxas -O3 -Xcompiler -O3", ""])
    assert b.archs == ["sm_75", "sm_90", "compute_90"]
    assert _contents(b.artifact) == {"sm_75", "sm_90", "ptx:sm_90"}


@pytest.mark.slow
def test_the_users_arch_flags_replace_jitlabs(use_shared_cache):
    """An nvcc flag that chooses architectures (-gencode) stands alone, as in torch: the binary has only its arch."""
    b = torch_compat.build_inline("arch_list", cpp_sources=HOST, cuda_sources=LAUNCHER, compile_only=True, arch="sm_90",
                                  no_implicit_headers=True, extra_cuda_cflags=["-gencode arch=compute_80,code=sm_80"])
    assert _contents(b.artifact) == {"sm_80"}


def test_two_owners_of_one_name_write_to_their_own_folders(cache):
    """Inside names_of(owner), a name's sources go to the owner's folder: two graded solutions both naming
    their extension "matmul" neither share files nor wait on one lock."""
    with torch_compat.names_of("alice"):
        a = torch_compat.materialize("matmul", "int a;")
    with torch_compat.names_of("bob"):
        b = torch_compat.materialize("matmul", "int b;")
    mine = torch_compat.materialize("matmul", "int c;")
    assert len({a.folder, b.folder, mine.folder}) == 3
    assert a.files[0].read_text().endswith("int a;") and b.files[0].read_text().endswith("int b;")
    assert mine.folder == cache / "inline" / "matmul"


def test_a_name_busy_elsewhere_builds_other_sources_in_a_folder_of_their_own(cache):
    """While another build holds a name's folder, claimed() gives other sources their own folder (the same
    sources the same one), so parallel builds of different solutions named alike do not wait in line."""
    from jitlab.jit import locks

    own = torch_compat.folder_of("matmul")
    with locks.build_lock(own.name, root=own.parent):  # another build of "matmul" in progress
        with torch_compat.claimed("matmul", "int a;") as a:
            pass
        with torch_compat.claimed("matmul", "int a;") as again, torch_compat.claimed("matmul", "int b;") as b:
            pass
    with torch_compat.claimed("matmul", "int a;") as free:
        pass
    assert a == again and len({a, b, own}) == 3 and a.name.startswith("matmul__")
    assert free == own


@pytest.mark.parametrize("flags, archs", [
    (["-gencode", "arch=compute_80,code=sm_80"], ["sm_80"]),
    (["-gencode=arch=compute_90a,code=[sm_90a,compute_90a]"], ["sm_90a", "compute_90a"]),
    (["-arch=sm_86"], ["sm_86"]),
    (["-O3", "-arch", "sm_75"], ["sm_75"]),
    (["-arch=native"], []),
])
def test_the_archs_a_users_nvcc_flags_name(flags, archs):
    """The archs named by -gencode's code= or -arch are the build's archs (none for -arch=native: jitlab's default)."""
    assert shellwords.archs_named(flags) == archs
