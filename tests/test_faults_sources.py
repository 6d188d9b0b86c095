"""Fault suite, sources and saves (issue 11): each planted fault as a user meets it, and the outcome.

Scenarios (CPU; C++ snippets are built with the host compiler, ``.cu`` snippets compile-only):

1. A header found through ``cflags=["-I…"]`` or ``-isystem`` is edited: the next load, in this
   process and in a new one, runs the new header (it is in the build key, recursively); a
   torch-style unit's object is recompiled too; torch's and CUDA's own folders are not hashed.
2. ``static``, ``constexpr``, ``inline`` and anonymous-namespace helpers in a kernel-only snippet
   (``.cpp`` and ``.cu``) are internal: the snippet builds, only the real entry points are exported,
   and the error for an unmappable exported function gives advice that works.
3. Awkward paths: a snippet in a folder named with ``"`` and ``\\`` builds and its errors name the
   right file and line; every generated ``#line`` is escaped; a cache folder, or a snippet folder,
   with ``$`` or ``:`` in its path builds (torch's ``build.ninja`` cannot name it directly).
4. A UTF-8 byte-order mark: a ``.cpp`` with one builds and runs, a ``.cu`` with one compiles, and
   the user's file keeps its bytes.
5. ``%%cpp``/``%%cuda`` saves: a symlinked snippet stays a link and its target gets the text; the
   file keeps its mode (a new one gets the umask's); history entries saved within one second (or
   one clock tick) are listed in save order.
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import jitlab
from jitlab import builder, codegen, snippets
from jitlab.errors import CompileError, SnippetError
from jitlab.parse import line_directive, parse_file

ROOT = Path(__file__).resolve().parent.parent

SCALE_WITH_HEADER = """
#include {include}
void scale(float* y, const float* x, int n) {{
    for (int i = 0; i < n; ++i) y[i] = FACTOR * x[i];
}}
"""


def first(m) -> float:
    """``m.scale`` applied to ones: the factor the build was compiled with."""
    y = torch.empty(3)
    m.scale(y, torch.ones(3), 3)
    return y[0].item()


def header_folder(tmp_path: Path, factor: str) -> Path:
    """A folder outside the snippet's, holding cfg.h, which includes factor.h (the value)."""
    inc = tmp_path / "include"
    inc.mkdir(exist_ok=True)
    (inc / "cfg.h").write_text('#pragma once\n#include "factor.h"\n')
    (inc / "factor.h").write_text(f"#define FACTOR {factor}\n")
    return inc


# ---- 1. headers found through the user's include flags -------------------------------------------

@pytest.mark.parametrize("include,flags", [
    ('"cfg.h"', lambda d: ["-I" + str(d)]),
    ("<cfg.h>", lambda d: ["-isystem", str(d)]),
], ids=["-I", "-isystem"])
def test_edited_header_in_a_flag_include_folder_is_rebuilt(cache, write, tmp_path, include, flags):
    """Editing a header reached through -I / -isystem gives the new result here and in a new process."""
    inc = header_folder(tmp_path, "2.0f")
    p = write("k.cpp", SCALE_WITH_HEADER.format(include=include))
    assert first(jitlab.load(p, cflags=flags(inc))) == 2.0
    (inc / "factor.h").write_text("#define FACTOR 7.0f\n")  # nested: cfg.h includes it
    code = f"import jitlab, torch; m = jitlab.load({str(p)!r}, cflags={flags(inc)!r}); " \
           f"y = torch.empty(1); m.scale(y, torch.ones(1), 1); print('RESULT', y.item())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert "RESULT 7.0" in out.stdout, out.stdout + out.stderr
    m = jitlab.load(p, cflags=flags(inc))
    assert first(m) == 7.0 and m.build.cached  # the other process built it under the same key


def test_flag_include_headers_are_in_each_units_object_key(write, tmp_path):
    """A torch-style unit carries the hashes of the headers it includes, so its cached object is not reused."""
    inc = header_folder(tmp_path, "2")
    p = write("t.cpp", "#include <torch/extension.h>\n#include \"cfg.h\"\n"
                       "torch::Tensor scale(torch::Tensor x) { return x * FACTOR; }\n")
    opts = builder.Options(cflags=["-I" + str(inc)])
    before, _, parts_before = builder.prepare(p, opts)
    (inc / "factor.h").write_text("#define FACTOR 5\n")
    after, _, parts_after = builder.prepare(p, opts)
    [unit_before] = [u for u in before.units if u.source == str(p.resolve())]
    [unit_after] = [u for u in after.units if u.source == str(p.resolve())]
    assert str((inc / "factor.h").resolve()) in dict(unit_after.deps)
    assert unit_before.deps != unit_after.deps
    assert parts_before["headers"] != parts_after["headers"]
    bind = [u for u in after.units if u.name == "bind.cpp"]
    assert bind and bind[0].deps == ()  # generated code includes no user header


@pytest.mark.slow
def test_torch_style_header_edit_recompiles_its_unit(cache, write, tmp_path):
    """End to end: a torch-style .cpp whose header (via -I) changes runs the new header."""
    inc = header_folder(tmp_path, "2")
    p = write("t.cpp", "#include <torch/extension.h>\n#include \"cfg.h\"\n"
                       "torch::Tensor scale(torch::Tensor x) { return x * FACTOR; }\n")
    assert jitlab.load(p, cflags=["-I" + str(inc)]).scale(torch.ones(2)).tolist() == [2, 2]
    (inc / "factor.h").write_text("#define FACTOR 5\n")
    m = jitlab.load(p, cflags=["-I" + str(inc)])
    assert m.scale(torch.ones(2)).tolist() == [5, 5]
    assert {u["name"]: u["cached"] for u in m.build.manifest["units"]} == {"t.cpp": False, "bind.cpp": True}


def test_toolchain_include_folders_are_not_user_folders(tmp_path):
    """torch's and CUDA's include folders passed as flags are the toolchain's (its fingerprint covers them)."""
    from torch.utils import cpp_extension

    from jitlab import toolchain

    mine = tmp_path / "mine"
    flags = [*(f"-I{d}" for d in cpp_extension.include_paths("cpu")),
             "-isystem", str(toolchain.cuda_home() / "include"), f"-I{mine}", "-I/usr/include"]
    assert builder.user_include_dirs(builder.Options(cflags=flags, cuda_cflags=[f"--include-path={mine}"])) \
        == [str(mine.resolve())]


# ---- 2. internal helpers in kernel-only snippets -------------------------------------------------

HELPERS_CPP = """
#include <cstddef>
struct Pair { float a, b; };
static float twice(const Pair& p) { return 2 * p.a; }
constexpr float one() { return 1.0f; }
inline Pair make(float v) { return {v, v}; }
namespace { float add_one(float& v) { return v + one(); } }
void scale(float* y, const float* x, int n) {
    for (int i = 0; i < n; ++i) { float v = twice(make(x[i])); y[i] = add_one(v); }
}
"""


def test_cpp_internal_helpers_build_and_are_not_exported(cache, write):
    """static / constexpr / inline / anonymous-namespace helpers with unmappable types are internal."""
    m = jitlab.load(write("helpers.cpp", HELPERS_CPP))
    assert m.functions == ["scale"]
    assert first(m) == 3.0
    with pytest.raises(AttributeError, match="drop `static` to call it from Python"):
        m.twice
    reasons = dict(m.build.plan.skipped)
    assert set(reasons) == {"twice", "one", "make", "add_one"}
    assert "anonymous namespace" in reasons["add_one"] and "`constexpr`" in reasons["one"]


HELPERS_CU = """
static int blocks_for(int n) { return (n + 255) / 256; }
constexpr int block_size() { return 256; }
__host__ __device__ inline float twice(float v) { return 2.0f * v; }
__host__ __device__ __forceinline__ float thrice(float v) { return 3.0f * v; }
namespace { __global__ void hidden(float* y) {} }
__global__ void scale(float* y, const float* x, int n) {
    int i = blockIdx.x * block_size() + threadIdx.x;
    if (i < n) y[i] = thrice(twice(x[i]));
}
"""


def test_cu_internal_helpers_parse_as_internal_and_compile(cache, write):
    """The .cu's helpers are internal (parse), and nvcc compiles the snippet with only `scale` exported."""
    p = write("helpers.cu", HELPERS_CU)
    internal = {fn.name: fn.internal for fn in parse_file(p).functions}
    assert internal == {"blocks_for": "static", "block_size": "constexpr", "twice": "inline", "thrice": "inline",
                        "hidden": "anonymous namespace", "scale": ""}
    b = jitlab.build(p, compile_only=True, arch="sm_90", engine="nvcc")
    assert [fn.name for fn in b.plan.exported] == ["scale"]
    assert b.artifact.is_file() and "scale" in b.resources


def test_unmappable_function_advice_works(cache, write):
    """The error for an exported helper says to mark it `static`; doing so makes the snippet build."""
    src = "float norm(const float& v) { return v; }\n" \
          "void scale(float* y, const float* x, int n) { for (int i = 0; i < n; ++i) y[i] = norm(x[i]); }\n"
    p = write("advice.cpp", src)
    with pytest.raises(SnippetError, match="mark the function `static`") as e:
        jitlab.load(p)
    assert "norm" in str(e.value)
    p.write_text("static " + src)
    assert first(jitlab.load(p)) == 1.0


def test_torch_style_anonymous_namespace_function_is_not_bound(write):
    """A torch-style helper in an anonymous namespace is not bound (the binding unit could not link it)."""
    p = write("t.cpp", """
        #include <torch/extension.h>
        namespace { torch::Tensor helper(torch::Tensor x) { return x; } }
        constexpr int kTwo = 2;
        torch::Tensor op(torch::Tensor x) { return helper(x) * kTwo; }
    """)
    plan = codegen.plan([parse_file(p)], "t")
    assert plan.functions == ["op"] and "anonymous namespace" in dict(plan.skipped)["helper"]


# ---- 3. awkward paths ----------------------------------------------------------------------------

def test_line_directive_escapes_backslash_and_quote():
    r"""A path with " and \ is written as a valid C string literal."""
    assert line_directive('/a/we"ird\\dir/k.cu') == '#line 1 "/a/we\\"ird\\\\dir/k.cu"\n'


_LINE = re.compile(r'^#line \d+ "((?:[^"\\]|\\.)*)"$', re.MULTILINE)


def test_every_generated_line_directive_is_escaped(tmp_path):
    """Kernel-only sources and torch-style units (split .cu included) name the file as it is on disk."""
    folder = tmp_path / 'we"ird\\dir'
    folder.mkdir()
    k = folder / "k.cpp"
    k.write_text("void k(float* y) {}\n")
    t = tmp_path / "back\\slash" / "t.cu"  # a CUDA file's path cannot hold a quote (see below)
    t.parent.mkdir()
    t.write_text("#include <torch/extension.h>\n__global__ void k(float* y) {}\n"
                 "torch::Tensor op(torch::Tensor x) { k<<<1, 1>>>(x.data_ptr<float>()); return x; }\n")
    texts = [*codegen.plan([parse_file(k)], "k").cpp_sources,
             *(u.text for u in codegen.plan([parse_file(t)], "t").units)]
    names = {re.sub(r"\\(.)", r"\1", m) for text in texts for m in _LINE.findall(text)}
    assert {str(k), str(t)} <= names
    assert all(text.count("#line") == len(_LINE.findall(text)) for text in texts)


@pytest.fixture
def odd_folder(tmp_path) -> Path:
    d = tmp_path / 'we"ird\\dir'
    d.mkdir()
    return d


def test_snippet_in_a_folder_with_quote_and_backslash_builds(cache, odd_folder):
    """A .cpp (with a local header) in such a folder builds and runs."""
    (odd_folder / "f.h").write_text("#define FACTOR 4.0f\n")
    p = odd_folder / "k.cpp"
    p.write_text(SCALE_WITH_HEADER.format(include='"f.h"'))
    assert first(jitlab.load(p)) == 4.0


def test_errors_in_such_a_folder_name_the_users_file(cache, odd_folder):
    """A compile error (in the snippet, then in its header) is a CompileError at the right file and line."""
    p = odd_folder / "bad.cpp"
    p.write_text("void scale(float* y, const float* x, int n) {\n  y[0] = undefined_name;\n}\n")
    with pytest.raises(CompileError) as e:
        jitlab.load(p)
    assert (e.value.diagnostics[0].path, e.value.diagnostics[0].line) == (str(p), 2)
    (odd_folder / "h.h").write_text("int oops = ;\n")
    p.write_text('#include "h.h"\nvoid scale(float* y, const float* x, int n) { y[0] = x[0]; }\n')
    with pytest.raises(CompileError) as e:
        jitlab.load(p)
    assert (e.value.diagnostics[0].path, e.value.diagnostics[0].line) == (str(odd_folder / "h.h"), 1)


@pytest.mark.parametrize("engine", ["nvcc", "auto"])
def test_cu_in_a_folder_with_a_backslash_compiles_and_errors_name_it(cache, tmp_path, engine):
    """nvcc and NVRTC (auto) compile a .cu there, and report its error at its own path and line."""
    (tmp_path / "back\\slash").mkdir()
    p = tmp_path / "back\\slash" / "k.cu"
    p.write_text("__global__ void k(float* y) { y[threadIdx.x] = 1.0f; }\n")
    assert jitlab.build(p, compile_only=True, arch="sm_90", engine=engine).artifact.is_file()
    p.write_text("__global__ void k(float* y) {\n  y[threadIdx.x] = undefined_name;\n}\n")
    with pytest.raises(CompileError) as e:
        jitlab.build(p, compile_only=True, arch="sm_90", engine=engine)
    assert (e.value.diagnostics[0].path, e.value.diagnostics[0].line) == (str(p), 2)


def test_cu_in_a_folder_with_a_quote_is_refused_with_the_fix(cache, odd_folder):
    """nvcc and ptxas cannot take a quote in a CUDA file's path: a SnippetError says so, not a CompileError."""
    p = odd_folder / "k.cu"
    p.write_text("__global__ void k(float* y) { y[threadIdx.x] = 1.0f; }\n")
    with pytest.raises(SnippetError, match="rename the folder or file without it"):
        jitlab.build(p, compile_only=True, arch="sm_90", engine="nvcc")


@pytest.mark.parametrize("char", ["$", ":"])
def test_cache_folder_with_ninja_special_characters_builds(write, tmp_path, monkeypatch, char):
    """torch's build.ninja cannot name such a folder; the build still works, and the cache stays there."""
    root = tmp_path / f"ca{char}che"
    monkeypatch.setenv("JITLAB_CACHE_DIR", str(root))
    p = write("k.cpp", "void scale(float* y, const float* x, int n) { for (int i = 0; i < n; ++i) y[i] = 2 * x[i]; }\n")
    m = jitlab.load(p)
    assert first(m) == 2.0 and m.build.folder.parent == root and m.build.artifact.is_file()


def test_snippet_folder_with_a_dollar_builds(cache, tmp_path):
    """The snippet's own folder (an include path in build.ninja) may hold a `$` too."""
    d = tmp_path / "a$HOME"
    d.mkdir()
    (d / "f.h").write_text("#define FACTOR 6.0f\n")
    p = d / "k.cpp"
    p.write_text(SCALE_WITH_HEADER.format(include='"f.h"'))
    assert first(jitlab.load(p)) == 6.0


# ---- 4. a UTF-8 byte-order mark -------------------------------------------------------------------

BOM = b"\xef\xbb\xbf"


def test_cpp_with_a_byte_order_mark_builds_and_runs(cache, tmp_path):
    """A .cpp saved with a BOM builds and runs; the file keeps its bytes."""
    p = tmp_path / "bom.cpp"
    data = BOM + b"void scale(float* y, const float* x, int n) { for (int i = 0; i < n; ++i) y[i] = 3 * x[i]; }\n"
    p.write_bytes(data)
    assert first(jitlab.load(p)) == 3.0
    assert p.read_bytes() == data


@pytest.mark.parametrize("engine", ["nvcc", "auto"])
def test_cu_with_a_byte_order_mark_compiles(cache, tmp_path, engine):
    """A .cu saved with a BOM compiles (nvcc, and NVRTC through auto)."""
    p = tmp_path / "bom.cu"
    p.write_bytes(BOM + b"__global__ void k(float* y) { y[threadIdx.x] = 1.0f; }\n")
    b = jitlab.build(p, compile_only=True, arch="sm_90", engine=engine)
    assert b.artifact.is_file() and p.read_bytes().startswith(BOM)


# ---- 5. %%cpp / %%cuda saves ----------------------------------------------------------------------

@pytest.fixture
def ip(cache, tmp_path, monkeypatch):
    from IPython.core.interactiveshell import InteractiveShell

    monkeypatch.chdir(tmp_path)
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "jitlab")
    yield shell
    InteractiveShell.clear_instance()


KERNEL = "__global__ void k(float* y) {{ y[threadIdx.x] = {}; }}\n"


def cuda_cell(ip, text: str) -> None:
    """Run a `%%cuda k` cell that saves kernels/k.cu and compile-checks it (no GPU needed)."""
    ip.run_cell_magic("cuda", "k --compile-only --arch sm_90", text)


def test_save_writes_through_a_symlink(ip, tmp_path):
    """A symlinked snippet stays a link; the file it points to gets the cell; the old text goes to history."""
    real = tmp_path / "elsewhere" / "k.cu"
    real.parent.mkdir()
    real.write_text(KERNEL.format("1.0f"))
    link = tmp_path / "kernels" / "k.cu"
    link.parent.mkdir()
    link.symlink_to(real)
    cuda_cell(ip, KERNEL.format("2.0f"))
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert real.read_text() == KERNEL.format("2.0f")
    assert [p.read_text() for p in snippets.history(link)] == [KERNEL.format("1.0f")]
    assert sorted(x.name for x in real.parent.iterdir()) == ["k.cu"]  # no temporary file left


def test_save_keeps_the_files_mode(ip, tmp_path):
    """Saving over a 0664 snippet leaves it 0664 (not mkstemp's 0600)."""
    p = tmp_path / "kernels" / "k.cu"
    p.parent.mkdir()
    p.write_text(KERNEL.format("1.0f"))
    p.chmod(0o664)
    cuda_cell(ip, KERNEL.format("2.0f"))
    assert p.read_text() == KERNEL.format("2.0f")
    assert stat.S_IMODE(p.stat().st_mode) == 0o664


def test_new_snippet_and_history_get_the_umask_mode(ip, tmp_path):
    """A new snippet (and a history entry) gets 0666 less the umask, as any new file would."""
    old = os.umask(0o027)
    try:
        cuda_cell(ip, KERNEL.format("1.0f"))
        cuda_cell(ip, KERNEL.format("2.0f"))
    finally:
        os.umask(old)
    p = tmp_path / "kernels" / "k.cu"
    assert stat.S_IMODE(p.stat().st_mode) == 0o640
    [entry] = snippets.history(p)
    assert stat.S_IMODE(entry.stat().st_mode) == 0o640


def _texts_in_falling_hash_order(n: int) -> list[str]:
    """n kernels whose history names would sort, by hash, in the reverse of their save order."""
    import hashlib

    out, last = [], "g"
    for i in range(10_000):
        text = KERNEL.format(f"{i}.0f")
        digest = hashlib.sha256(text.encode()).hexdigest()[:8]
        if digest < last:
            out.append(text)
            last = digest
            if len(out) == n:
                return out
    raise AssertionError("no such texts")


def test_history_saved_within_one_second_is_in_save_order(ip, tmp_path):
    """%%cuda cells run in quick succession (one second) are listed oldest first, whatever their hashes."""
    texts = _texts_in_falling_hash_order(4)
    ip.run_cell_magic("cuda", "warm --compile-only --arch sm_90", KERNEL.format("0.0f"))  # imports, toolchain
    for text in texts:
        cuda_cell(ip, text)
    p = tmp_path / "kernels" / "k.cu"
    assert [e.read_text() for e in snippets.history(p)] == texts[:-1]
    assert p.read_text() == texts[-1]


def test_history_order_survives_a_coarse_clock(tmp_path, monkeypatch):
    """Saves in one clock tick (or after the clock went back) still get later names, in order."""
    ticks = iter([2_000_000_000_000_000_000, 2_000_000_000_000_000_000, 1_999_000_000_000_000_000])
    monkeypatch.setattr(snippets.time, "time_ns", lambda: next(ticks))
    texts = _texts_in_falling_hash_order(4)
    p = tmp_path / "k.cpp"
    for text in texts:
        snippets.save(p, text)
    entries = snippets.history(p)
    assert [e.read_text() for e in entries] == texts[:-1]
    assert sorted(e.name for e in entries) == [e.name for e in entries]


def test_history_labels_show_the_save_time():
    """The playground's labels read both the new names and the older whole-second ones."""
    assert snippets.version_label(Path("20240102-134501-123456789-abcd1234.cu")) == "2024-01-02 13:45:01.123 (abcd1234)"
    assert snippets.version_label(Path("20240102-134501-abcd1234.cu")) == "2024-01-02 13:45:01 (abcd1234)"
