"""C++ snippets end to end on CPU: build, call, cache, edit, revert, recovery, concurrency, errors.

These are the CI's real path through the loader (no GPU there): the same code builds CUDA snippets.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import jitlab
from jitlab.jit import cache as jcache

ROOT = Path(__file__).resolve().parent.parent

SCALE = """
// y = C * x
void scale(float* y, const float* x, int n) {
    for (int i = 0; i < n; ++i) y[i] = %s * x[i];
}
"""


def scale_src(c: str) -> str:
    return (SCALE % c).lstrip("\n")


def run_scale(m, n=5):
    x = torch.arange(n, dtype=torch.float32)
    y = torch.empty(n)
    m.scale(y, x, n)
    return y


def build_count(cache: Path) -> int:
    return len([p for p in cache.iterdir() if p.is_dir()]) if cache.exists() else 0


def test_build_call_and_cache_hit(cache, write):
    """First load compiles, the second compiles nothing and returns the same module."""
    p = write("scale.cpp", scale_src("2.0f"))
    m1 = jitlab.load(p)
    assert not m1.build.cached
    assert run_scale(m1).tolist() == [0, 2, 4, 6, 8]
    m2 = jitlab.load(p)
    assert m2.build.cached and m2 is m1
    assert build_count(cache) == 1


def test_edit_gives_new_result_then_revert_compiles_nothing(cache, write):
    """Edit the body: new key, new module, new result; revert: cache hit with the old result."""
    p = write("scale.cpp", scale_src("2.0f"))
    a = jitlab.load(p)
    p.write_text(scale_src("3.0f"))
    b = jitlab.load(p)
    assert b.build.name != a.build.name
    assert run_scale(b).tolist() == [0, 3, 6, 9, 12]
    p.write_text(scale_src("2.0f"))
    c = jitlab.load(p)
    assert c.build.cached and c.build.name == a.build.name
    assert run_scale(c).tolist() == [0, 2, 4, 6, 8]
    assert build_count(cache) == 2


def test_local_header_edit_changes_the_key(cache, write):
    """A local header is part of the key: editing it rebuilds."""
    write("k.h", "#define FACTOR 2.0f\n")
    p = write("k.cpp", '#include "k.h"\nvoid scale(float* y, const float* x, int n) { for (int i = 0; i < n; ++i) y[i] = FACTOR * x[i]; }\n')
    assert run_scale(jitlab.load(p)).tolist()[1] == 2
    write("k.h", "#define FACTOR 5.0f\n")
    m = jitlab.load(p)
    assert not m.build.cached and run_scale(m).tolist()[1] == 5


def test_defines_change_the_key(cache, write):
    """defines= reach the compiler and the key."""
    p = write("d.cpp", "void scale(float* y, const float* x, int n) { for (int i = 0; i < n; ++i) y[i] = F * x[i]; }\n")
    assert run_scale(jitlab.load(p, defines={"F": "4.0f"})).tolist()[1] == 4
    assert run_scale(jitlab.load(p, defines={"F": "7.0f"})).tolist()[1] == 7


@pytest.mark.slow
def test_new_process_reuses_the_cache(cache, write):
    """Another process loading the same snippet compiles nothing."""
    p = write("scale.cpp", scale_src("2.0f"))
    jitlab.load(p)
    code = (f"import sys; sys.path.insert(0, {str(ROOT)!r}); import jitlab, torch; m = jitlab.load({str(p)!r}); "
            f"x = torch.ones(3); y = torch.empty(3); m.scale(y, x, 3); print(m.build.cached, y.tolist())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[0] == "True" and "[2.0, 2.0, 2.0]" in out.stdout


def test_stale_lock_files_do_not_hang(cache, write):
    """A build killed half-way leaves torch's `lock` in an unfinished folder and our .lock: load still works."""
    p = write("scale.cpp", scale_src("2.0f"))
    plan, _, parts = jitlab.jit.builder.prepare(p, jitlab.Options())
    name = jcache.module_name(plan.stem, jcache.build_key(parts))
    folder = cache / name
    folder.mkdir(parents=True)
    (folder / "lock").write_text("")           # torch's FileBaton would wait on this forever
    (folder / "main.cpp").write_text("garbage")  # half-written sources from the killed build
    (cache / f"{name}.lock").write_text("")      # our lock file, no longer held by anyone
    m = jitlab.load(p)
    assert not m.build.cached and run_scale(m).tolist()[2] == 4


def test_corrupt_binary_is_rebuilt_with_a_warning(cache, write):
    """A .so that no longer matches its recorded hash is a miss: rebuilt, with one warning line."""
    p = write("scale.cpp", scale_src("2.0f"))
    m = jitlab.load(p)
    so = m.build.artifact
    name = m.build.name
    jitlab.jit.loader._loaded.pop(name)  # as if in a new process
    broken = so.with_suffix(".broken")
    broken.write_bytes(b"\x7fELF not really")
    os.replace(broken, so)  # a new inode: the copy this process has mapped stays intact
    with pytest.warns(UserWarning, match="corrupt"):
        m2 = jitlab.load(p)
    assert not m2.build.cached and run_scale(m2).tolist()[1] == 2


def test_unreadable_manifest_is_a_miss(cache, write):
    """A truncated manifest is treated as an unfinished build, never a crash."""
    p = write("scale.cpp", scale_src("2.0f"))
    m = jitlab.load(p)
    jitlab.jit.loader._loaded.pop(m.build.name)
    (m.build.folder / "jitlab.json").write_text('{"format": ')
    m2 = jitlab.load(p)
    assert not m2.build.cached and run_scale(m2).tolist()[1] == 2


def test_entries_are_trusted_by_hash_or_by_size_and_stamp_where_asked(tmp_path, monkeypatch):
    """An artifact changed in place is caught by its hash; a header-set entry made with content=False
    (the precompiled headers: hashing 0.5 GB took ~0.5 s per host unit) is trusted by its size and stamp
    (inode, change time) without reading it, so a write of the same size or a truncation is made again."""
    from jitlab.jit import cache as jcache
    from jitlab.jit.engines import pch

    monkeypatch.setenv("JITLAB_PCH_DIR", str(tmp_path / "pch"))
    made = []

    def make(folder):
        made.append(folder)
        (folder / "a.gch").write_bytes(b"x" * 100)
        return folder / "a.gch"

    art = pch.made_once("torch-test-0", make, content=False)
    assert pch.made_once("torch-test-0", make, content=False) == art and len(made) == 1
    art.write_bytes(b"y" * 100)  # same size, other bytes
    assert jcache.trusted_manifest(art.parent) is None  # by hash: not trusted
    assert pch.made_once("torch-test-0", make, content=False) == art and len(made) == 2
    art.write_bytes(b"y" * 99)
    assert pch.made_once("torch-test-0", make, content=False) == art and len(made) == 3
    assert art.read_bytes() == b"x" * 100


@pytest.mark.slow
def test_concurrent_loads_build_once(cache, write):
    """Two processes loading the same new snippet at once: one builds, both get a correct module."""
    p = write("scale.cpp", scale_src("6.0f"))
    code = (f"import sys; sys.path.insert(0, {str(ROOT)!r}); import jitlab, torch; m = jitlab.load({str(p)!r}); "
            f"x = torch.ones(2); y = torch.empty(2); m.scale(y, x, 2); print(m.build.cached, y.tolist())")
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    outs = [pr.communicate(timeout=300) for pr in procs]
    assert all(pr.returncode == 0 for pr in procs), [o[1] for o in outs]
    assert all("[6.0, 6.0]" in o[0] for o in outs)
    assert sorted(o[0].split()[0] for o in outs) == ["False", "True"]  # exactly one compiled
    assert build_count(cache) == 1


def test_compile_error_points_at_the_users_line(cache, write):
    """The error names the user's file and line, quotes the line with a caret, and keeps the log."""
    p = write("bad.cpp", """
        void scale(float* y, const float* x, int n) {
            for (int i = 0; i < n; ++i)
                y[i] = undefined_thing * x[i];
        }
    """)
    with pytest.raises(jitlab.CompileError) as ei:
        jitlab.load(p)
    err = ei.value
    msg = str(err)
    assert "bad.cpp:3:" in msg and "undefined_thing" in msg
    assert "    3 |         y[i] = undefined_thing * x[i];" in msg
    assert "^" in msg.splitlines()[msg.splitlines().index("    3 |         y[i] = undefined_thing * x[i];") + 1]
    assert err.diagnostics[0].path == str(p) and err.diagnostics[0].line == 3
    assert "undefined_thing" in err.log and len(err.log) > len(err.excerpt)


def test_failed_build_does_not_poison_the_name(cache, write):
    """After a failed build, fixing the file and loading again works."""
    p = write("s.cpp", "void scale(float* y, const float* x, int n) { oops; }\n")
    with pytest.raises(jitlab.CompileError):
        jitlab.load(p)
    with pytest.raises(jitlab.CompileError):  # the same broken source fails the same way, no stale module
        jitlab.load(p)
    p.write_text(scale_src("2.0f"))
    assert run_scale(jitlab.load(p)).tolist()[1] == 2


def test_compile_error_is_picklable(cache, write):
    """CompileError survives pickling (worker processes send it back)."""
    import pickle

    p = write("s.cpp", "void f(int n) { nope; }\n")
    with pytest.raises(jitlab.CompileError) as ei:
        jitlab.load(p)
    back = pickle.loads(pickle.dumps(ei.value))
    assert str(back) == str(ei.value)


# ---- bad input never crashes the process -------------------------------------------------------
@pytest.fixture
def axpy(cache, write):
    p = write("axpy.cpp", """
        #include <cstdint>
        #include <stdexcept>
        void axpy(float* y, const float* x, float a, int64_t n) { for (int64_t i = 0; i < n; ++i) y[i] = a * x[i] + y[i]; }
        double total(const double* x, int n) { double s = 0; for (int i = 0; i < n; ++i) s += x[i]; return s; }
        void check_positive(int n) { if (n < 0) throw std::invalid_argument("n must be >= 0"); }
        int count_true(const bool* b, unsigned char n) { int c = 0; for (int i = 0; i < n; ++i) c += b[i]; return c; }
    """)
    return jitlab.load(p)


def test_scalar_return_values(axpy):
    """Host functions return scalars to Python."""
    assert axpy.total(torch.arange(4, dtype=torch.float64), 4) == 6.0
    assert axpy.count_true(torch.tensor([True, False, True]), 3) == 2


def test_wrong_dtype(axpy):
    """float64 for a float* names the argument and the conversion."""
    with pytest.raises(jitlab.ArgumentError, match=r"argument 2 `x` \(const float\*\) takes a float32 tensor, got float64"):
        axpy.axpy(torch.zeros(3), torch.zeros(3, dtype=torch.float64), 1.0, 3)


def test_non_contiguous_view(axpy):
    """A strided view is refused rather than read wrongly."""
    with pytest.raises(jitlab.ArgumentError, match="contiguous"):
        axpy.axpy(torch.zeros(3), torch.zeros(6)[::2], 1.0, 3)


def test_wrong_argument_count(axpy):
    """Too few arguments: Python's message names the missing parameter by its C name."""
    with pytest.raises(TypeError, match="'n'"):
        axpy.axpy(torch.zeros(3), torch.zeros(3), 1.0)


def test_wrong_scalar_type(axpy):
    """A string for a float and a float for an integer are refused."""
    with pytest.raises(jitlab.ArgumentError, match="`a` .* takes a float, got str"):
        axpy.axpy(torch.zeros(3), torch.zeros(3), "two", 3)
    with pytest.raises(jitlab.ArgumentError, match="`n` .* takes an int, got float"):
        axpy.axpy(torch.zeros(3), torch.zeros(3), 1.0, 3.5)


def test_integer_out_of_range(axpy):
    """An int that does not fit the C type is refused, not silently truncated."""
    with pytest.raises(jitlab.ArgumentError, match=r"must be in \[-2147483648, 2147483647\]"):
        axpy.total(torch.zeros(1, dtype=torch.float64), 2**40)


def test_output_requiring_grad(axpy):
    """Writing into a leaf that requires grad would corrupt autograd: refused with the fix."""
    with pytest.raises(jitlab.ArgumentError, match="requires grad"):
        axpy.axpy(torch.zeros(3, requires_grad=True), torch.zeros(3), 1.0, 3)


def test_non_tensor_for_pointer(axpy):
    """A list where a tensor is expected."""
    with pytest.raises(jitlab.ArgumentError, match="takes a tensor, got list"):
        axpy.axpy([0.0, 0.0], torch.zeros(2), 1.0, 2)


def test_meta_tensor_for_cpu_snippet(axpy):
    """A tensor that is not on the CPU is refused by a C++ snippet."""
    with pytest.raises(jitlab.ArgumentError, match="CPU tensor"):
        axpy.axpy(torch.zeros(3, device="meta"), torch.zeros(3), 1.0, 3)


def test_cpp_exception_becomes_python_error(axpy):
    """A C++ exception in a host function is raised in Python, the process lives on."""
    with pytest.raises(jitlab.LaunchError, match="n must be >= 0"):
        axpy.check_positive(-1)
    axpy.check_positive(1)


def test_unknown_name_did_you_mean(axpy):
    """A typo in a function name suggests the right one."""
    with pytest.raises(AttributeError, match="did you mean `axpy`"):
        axpy.axpi


def test_unparsable_snippet(cache, write):
    """Text that is not C++ gets the compiler's own error at its line, not the parser's "nothing found"."""
    with pytest.raises(jitlab.CompileError, match=r"junk.cpp:1:.*error") as e:
        jitlab.load(write("junk.cpp", "this is ( not C++\n"))
    assert "no __global__ kernel" not in str(e.value)


def test_a_file_the_compiler_accepts_but_that_defines_nothing_says_so(cache, write):
    """Valid C++ with nothing to call (only a declaration) is a SnippetError saying what a snippet defines."""
    with pytest.raises(jitlab.SnippetError, match="no __global__ kernel or host function found"):
        jitlab.load(write("decl.cpp", "int f(int);\n"))


def test_missing_path_did_you_mean(cache, write):
    """A misspelled path suggests the file that exists."""
    p = write("scale.cpp", scale_src("2.0f"))
    with pytest.raises(jitlab.SnippetError, match="did you mean .*scale.cpp"):
        jitlab.load(p.parent / "scael.cpp")


def test_describe_lists_roles(axpy):
    """The docstring of a function tells what to pass: dtype, device, in/out."""
    doc = axpy.axpy.__doc__
    assert "y: Tensor[float32, cpu, out]" in doc and "x: Tensor[float32, cpu, in]" in doc


def test_kernel_folder_with_header(cache, kernel_copy):
    """A multi-file kernel-only C++ snippet loaded as a folder."""
    d = kernel_copy("add2_cpu.cpp").parent / "multi"
    d.mkdir()
    (d / "ops.h").write_text("inline float twice(float v) { return 2 * v; }\n")
    (d / "a.cpp").write_text('#include "ops.h"\nvoid dbl(float* y, const float* x, int n) { for (int i = 0; i < n; ++i) y[i] = twice(x[i]); }\n')
    (d / "b.cpp").write_text("int answer() { return 42; }\n")
    m = jitlab.load(d)
    y = torch.empty(2)
    m.dbl(y, torch.tensor([1.0, 2.0]), 2)
    assert y.tolist() == [2.0, 4.0] and m.answer() == 42


def test_printf_from_cpp_reaches_python(cache, write, capsys):
    """C-level printf output is forwarded to Python's stdout."""
    p = write("hello.cpp", '#include <cstdio>\nvoid hi(int n) { printf("hello %d\\n", n); }\n')
    jitlab.load(p).hi(7)
    assert "hello 7" in capsys.readouterr().out


@pytest.mark.slow
def test_torch_style_cpp_snippets(use_shared_cache):
    """Torch-style C++ (seed 004's hello, a tensor function) builds, runs on CPU, reports C++ checks; its host
    functions compile on the `host` header set with their C-ABI entries, one unit, as a CUDA snippet's do."""
    kernels = ROOT / "kernels"
    m = jitlab.load(kernels / "square_matrix_cpu.cpp")
    assert {u["name"]: u["headers"] for u in m.build.manifest.units} == {"square_matrix_cpu.cpp": "host"}
    x = torch.randn(3, 5)
    torch.testing.assert_close(m.square_matrix_cpu(x), x * x)
    with pytest.raises(RuntimeError, match="matrix must be 2-D"):
        m.square_matrix_cpu(torch.ones(3))
    assert jitlab.load(kernels / "hello_cpp.cpp").hello() == "Hello World!"
    assert jitlab.load(kernels / "square_matrix_cpu.cpp").build.cached
    with pytest.raises(AttributeError, match="did you mean `square_matrix_cpu`"):
        m.square_matrix_gpu


def test_a_bad_argument_traceback_ends_at_the_call(axpy):
    """An ArgumentError's traceback holds the user's line and one jitlab frame, the call itself (named for the function)."""
    import traceback

    try:
        axpy.axpy(torch.zeros(3, dtype=torch.float64), torch.zeros(3), 2.0, 3)
    except jitlab.ArgumentError as e:
        frames = traceback.extract_tb(e.__traceback__)
    assert [f.name for f in frames] == ["test_a_bad_argument_traceback_ends_at_the_call", "axpy"]
    assert frames[-1].filename == "<jitlab wrapper axpy>"
