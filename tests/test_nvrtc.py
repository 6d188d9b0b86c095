"""The NVRTC engine on CPU: kernel-only snippets compiled in process to CUBIN (no GPU needed), the
cache, the nvcc fallback with its reason, errors at the user's line, and figures read from the CUBIN."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import jitlab
from jitlab import CompileError
from jitlab.errors import SnippetError

# Each test builds in a cache of its own: never the checkout's build_cache/, which other workers' tests write too
# (a memo rewritten there beside a test that had just corrupted it failed that test now and then).
pytestmark = pytest.mark.usefixtures("cache")

ROOT = Path(__file__).resolve().parent.parent
KERNELS = ROOT / "kernels"
PLANTED = ROOT / "tests" / "fixtures" / "planted" / "hello_threads.cu"

SCALE = """#include <cstdio>
#include <cstdint>
__global__ void scale(float* y, const float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = SCALE * x[i];
    if (i == 0) printf("n = %d, %d bytes\\n", n, (int)sizeof(std::int64_t));
}
"""


@pytest.fixture
def scale(tmp_path) -> Path:
    p = tmp_path / "scale.cu"
    p.write_text(SCALE.replace("SCALE", "2.0f"))
    return p


def _nvrtc(path, **kw) -> jitlab.Build:
    return jitlab.build(path, compile_only=True, engine="nvrtc", **kw)


def test_compiles_cubins_for_each_arch(scale):
    """One CUBIN (an ELF file, not PTX) per arch, with ptxas' figures for each."""
    b = _nvrtc(scale, arch="sm_75,sm_90")
    assert b.engine == "nvrtc" and not b.cached
    assert sorted(b.manifest.cubins) == ["sm_75", "sm_90"]
    for arch, name in b.manifest.cubins.items():
        assert (b.folder / name).read_bytes()[:4] == b"\x7fELF", arch
    assert b.manifest.kernels == {"scale": "_Z5scalePfPKfi"}
    assert set(b.resources["scale"]) == {"sm_75", "sm_90"}
    assert all(r["registers"] > 0 for r in b.resources["scale"].values())


def test_auto_takes_nvrtc_for_kernel_only_cuda(scale):
    """engine='auto' builds a kernel-only .cu snippet with NVRTC, with no notes."""
    b = jitlab.build(scale, compile_only=True, arch="sm_90")
    assert b.engine == "nvrtc" and b.notes == []


@pytest.mark.slow
def test_cache_edit_revert_and_new_process(scale):
    """The same source is a cache hit; an edit is a new build; a revert and a new process hit again."""
    first = _nvrtc(scale, arch="sm_90")
    assert _nvrtc(scale, arch="sm_90").cached
    original = scale.read_text()
    scale.write_text(original.replace("2.0f", "3.0f"))
    edited = _nvrtc(scale, arch="sm_90")
    assert not edited.cached and edited.name != first.name
    scale.write_text(original)
    assert _nvrtc(scale, arch="sm_90").name == first.name and _nvrtc(scale, arch="sm_90").cached
    code = (f"import jitlab; b = jitlab.build({str(scale)!r}, compile_only=True, arch='sm_90'); "
            f"print(b.engine, b.cached, b.name)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["nvrtc", "True", first.name]


@pytest.mark.slow
def test_new_process_hit_reads_nvrtc_version_from_the_cache(scale):
    """A cache hit in a new process takes NVRTC's version (part of the key) from the cache's memo,
    without loading cuda.bindings' NVRTC and driver bindings; a memo whose library changed is not
    trusted (NVRTC is asked again and the memo rewritten)."""
    import json

    from jitlab import config

    jitlab.jit.engines.nvrtc.version.cache_clear()  # asked once a process: this test's cache gets the memo
    first = _nvrtc(scale, arch="sm_90")
    memo = config.cache_dir() / ".versions"
    key = "nvrtc (remembered)"
    seen = json.loads(json.loads(memo.read_text())[key])
    assert seen["answer"][0] == jitlab.jit.engines.nvrtc.version() and Path(seen["answer"][1]).is_file()
    code = (f"import sys, jitlab; b = jitlab.build({str(scale)!r}, compile_only=True, arch='sm_90', engine='nvrtc'); "
            f"print(b.cached, b.name, 'cuda.bindings.nvrtc' in sys.modules)")
    run = lambda: subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert run() == ["True", first.name, "False"]
    moved = {"answer": ["0.1", seen["answer"][1]], "check": [*seen["check"][:-1], "moved"]}
    memo.write_text(json.dumps({**json.loads(memo.read_text()), key: json.dumps(moved)}))
    assert run() == ["True", first.name, "True"]  # asked NVRTC again: same version, same key
    assert json.loads(json.loads(memo.read_text())[key])["answer"] == seen["answer"]


@pytest.mark.slow
def test_engine_is_part_of_the_key(scale):
    """The same snippet built with nvcc is another build, and both stay cached."""
    a, b = _nvrtc(scale, arch="sm_90"), jitlab.build(scale, compile_only=True, arch="sm_90", engine="nvcc")
    assert (a.engine, b.engine) == ("nvrtc", "nvcc") and a.name != b.name
    assert b.resources["scale"]["sm_90"]["shared"] == a.resources["scale"]["sm_90"]["shared"]


def test_defines_reach_nvrtc(tmp_path):
    """defines= reach NVRTC: the snippet fails to compile with SCALE undefined and builds with SCALE defined."""
    p = tmp_path / "scale.cu"
    p.write_text(SCALE)
    with pytest.raises(CompileError):
        _nvrtc(p, arch="sm_90")  # SCALE undefined
    assert _nvrtc(p, arch="sm_90", defines={"SCALE": "4.0f"}).engine == "nvrtc"


def test_error_at_the_users_line(scale):
    """An error in the kernel is NVRTC's, at the user's file and line with the caret; auto reports
    it at once instead of asking nvcc."""
    scale.write_text(scale.read_text().replace("2.0f * x[i]", "2.0f * x[i] + undefined_q"))
    for engine in ("nvrtc", "auto"):
        with pytest.raises(CompileError) as e:
            jitlab.build(scale, compile_only=True, arch="sm_90", engine=engine)
        d = e.value.diagnostics[0]
        assert (Path(d.path), d.line) == (scale, 5) and "undefined_q" in d.message
        assert "NVRTC" in e.value.summary
        assert "^" in str(e.value)


@pytest.mark.parametrize("engine", ["nvrtc", "auto"])
def test_a_file_the_parser_cannot_read_is_nvrtcs_error_at_its_line(engine, cache):
    """Lesson 00's planted mistake (no `;` after printf), compile-only: NVRTC's error (the compiler this build
    uses) at the `}` it expected the `;` before, not the parser's "no __global__ kernel found"."""
    with pytest.raises(CompileError) as e:
        jitlab.build(PLANTED, compile_only=True, arch="sm_90", engine=engine)
    d = e.value.diagnostics[0]
    assert (Path(d.path), d.line) == (PLANTED, 8) and 'expected a ";"' in d.message, str(e.value)
    assert "NVRTC" in e.value.summary and "no __global__" not in str(e.value)


@pytest.mark.parametrize("snippet, reason", [
    ("add2.cu", "host function launch_add2() is called from Python"),
])
def test_nvcc_fallback_says_why(snippet, reason):
    """auto builds what NVRTC cannot with nvcc, saying why in one line; engine='nvrtc' refuses it
    with the reason and the fix."""
    with pytest.raises(SnippetError) as e:
        _nvrtc(KERNELS / snippet, arch="sm_90")
    assert reason in str(e.value) and "engine='auto' or 'nvcc'" in str(e.value)


@pytest.mark.slow
def test_host_header_goes_to_nvcc_with_a_note(tmp_path):
    """A kernel that includes a host header (<vector>) is built with nvcc, with a one-line note saying why."""
    p = tmp_path / "vec.cu"
    p.write_text("#include <vector>\n" + SCALE.replace("SCALE", "2.0f"))
    b = jitlab.build(p, compile_only=True, arch="sm_90")
    assert b.engine == "nvcc" and b.notes == ["built with nvcc: includes <vector>, a host header"]


@pytest.mark.slow
def test_device_headers_and_cooperative_groups(tmp_path):
    """cuda_fp16/bf16, cooperative groups, static and extern shared memory, __constant__ and a
    template helper all compile with NVRTC."""
    p = tmp_path / "features.cu"
    p.write_text("""#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
namespace cg = cooperative_groups;
__constant__ float c_scale[1];
template <typename T> __device__ T twice(T v) { return v + v; }
__global__ void block_sum(float* out, const float* x, int n) {
    extern __shared__ float dyn[];
    __shared__ float fixed[32];
    auto block = cg::this_thread_block();
    auto warp = cg::tiled_partition<32>(block);
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = i < n ? twice(x[i]) * c_scale[0] : 0.0f;
    dyn[threadIdx.x] = v;
    fixed[threadIdx.x % 32] = cg::reduce(warp, v, cg::plus<float>());
    block.sync();
    if (threadIdx.x == 0) atomicAdd(out, fixed[0] + dyn[0]);
}
__global__ void halves(__half* h, __nv_bfloat16* b, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { h[i] = __hadd(h[i], h[i]); b[i] = __float2bfloat16(__bfloat162float(b[i]) * 2.0f); }
}
""")
    b = _nvrtc(p, arch="sm_90")
    assert set(b.manifest.kernels) == {"block_sum", "halves"}
    assert b.resources["block_sum"]["sm_90"]["shared"] >= 128


def test_inspect_reads_the_cubin():
    """jitlab inspect's figures and SASS come from the NVRTC build's CUBIN."""
    from jitlab.tools import inspect as jinspect

    row_sum = KERNELS / "exercises" / "row_sum.cu"
    b = jitlab.build(row_sum, compile_only=True, arch="sm_90")
    assert b.engine == "nvrtc" and b.artifact.suffix == ".cubin"
    assert jinspect.resources(row_sum, "sm_90") == b.resources
    assert b.resources["row_sum"]["sm_90"]["shared"] == 1024
    sass = jinspect.sass(row_sum, "row_sum", "sm_90")
    assert "STS" in sass and "LDS" in sass  # the shared-memory tree reduction, in the CUBIN's SASS


def test_unknown_engine_names_the_choices(scale):
    """An unknown engine is a SnippetError that names the choices: 'auto', 'nvrtc', 'nvcc'."""
    with pytest.raises(SnippetError, match="engine='gcc': use one of 'auto', 'nvrtc', 'nvcc'"):
        jitlab.build(scale, compile_only=True, arch="sm_90", engine="gcc")


def _suitable(p: Path) -> bool:
    from jitlab.jit import builder
    from jitlab.jit.engines import nvrtc
    from jitlab.jit.flags import Options

    return nvrtc.unsuitable(builder.prepare(p, Options(arch=["sm_90"]))[0]) is None


SHIPPED = [p for p in sorted([*KERNELS.glob("*.cu"), *KERNELS.glob("exercises/*.cu"),
                              *KERNELS.glob("exercises/solutions/*.cu")]) if _suitable(p)]


@pytest.mark.parametrize("path", SHIPPED, ids=[str(p.relative_to(KERNELS)) for p in SHIPPED])
def test_every_shipped_kernel_only_snippet_compiles_with_nvrtc(path):
    """What nvcc compiles NVRTC compiles too: kernels/, the exercises and their solutions (one uses
    INFINITY without an include, as nvcc's implicit headers allow)."""
    assert _nvrtc(path, arch="sm_75").engine == "nvrtc"


def test_bindings_for_another_cuda_than_torchs_are_refused(monkeypatch):
    """cuda-bindings 13 (installed here) beside a torch built for CUDA 12: NVRTC is not used, and the
    reason names the extra that matches torch, jitlab[cu12]."""
    from importlib import metadata

    from jitlab.jit.engines import nvrtc

    assert metadata.version("cuda-bindings").startswith("13.")
    monkeypatch.setattr(nvrtc, "_torch_cuda_major", lambda: "12")
    why = nvrtc.unavailable()
    assert why and "for CUDA 13 but torch is built for CUDA 12" in why and "jitlab[cu12]" in why


def test_nvrtc_uses_the_installed_cuda_core_api():
    """jit/cudacore finds Program, ProgramOptions, ObjectCode and Device in this cuda-core (1.x: cuda.core)."""
    import cuda.core

    from jitlab.jit import cudacore

    core = cudacore.module()
    assert all(hasattr(core, n) for n in ("Program", "ProgramOptions", "ObjectCode", "Device"))
    assert core is cuda.core or int(cuda.core.__version__.split(".")[0]) == 0


@pytest.mark.slow
def test_first_nvrtc_builds_in_threads_at_once_all_compile(tmp_path):
    """A fresh process whose first NVRTC builds start in four threads at once (a sweep's parallel
    builds): each compiles; cuda-core's lazily imported parts are found once, under a lock."""
    code = f"""
import threading, jitlab
from pathlib import Path
errors, paths = [], []
for i in range(4):
    p = Path({str(tmp_path)!r}) / f"k{{i}}.cu"
    p.write_text("__global__ void k{{}}(float* y) {{{{ y[threadIdx.x] = {{}}.0f; }}}}\\n".format(i, i))
    paths.append(p)
def build(p):
    try:
        jitlab.build(p, compile_only=True, engine="nvrtc", arch="sm_90")
    except Exception as e:
        errors.append(repr(e))
threads = [threading.Thread(target=build, args=(p,)) for p in paths]
[t.start() for t in threads]
[t.join() for t in threads]
print("errors:", errors)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "JITLAB_CACHE_DIR": str(tmp_path / "cache")})
    assert out.returncode == 0 and "errors: []" in out.stdout, out.stdout + out.stderr[-3000:]


HIT_IN_A_NEW_PROCESS = """
import subprocess, sys
sys.path.insert(0, {root!r})
import jitlab
jitlab.build  # the library imported (torch, cuda-bindings, whose import asks ldconfig), as a script's first call does

def refused(*args, **kwargs):
    raise AssertionError(f"a hit started {{args[0] if args else kwargs.get('args')}}")

if sys.argv[1] == "hit":
    subprocess.Popen.__init__ = refused
b = jitlab.build({path!r}, compile_only=True, arch="sm_90")
assert b.cached == (sys.argv[1] == "hit")
print(" ".join(sorted(m for m in sys.modules if m.startswith("jitlab.jit.engines."))))
print(" ".join(sorted(m for m in TORCH_STYLE if m in sys.modules)) or "none")
"""
#: The modules of torch-style builds and torch's forms, which a kernel-only build never needs.
TORCH_STYLE = ("jitlab.jit.split", "jitlab.jit.binding", "jitlab.jit.cabi", "jitlab.jit.ops", "jitlab.jit.module_unit",
               "jitlab.jit.header_sets", "jitlab.jit.torch_compat")


@pytest.mark.slow
def test_a_kernel_only_hit_in_a_new_process_starts_no_tool_and_imports_no_other_engine(scale, cache):
    """A new process's kernel-only hit asks no compiler (their answers are kept in the cache) and imports no
    engine but NVRTC's, nor the modules of torch-style builds (the split, bindings, operators, torch's
    ``load_inline``: ~40 ms of imports on 2 cores); the process that built it asked them once."""
    code = f"TORCH_STYLE = {TORCH_STYLE!r}\n" + HIT_IN_A_NEW_PROCESS.format(root=str(ROOT), path=str(scale))
    env = {**os.environ, "JITLAB_CACHE_DIR": str(cache)}
    first = subprocess.run([sys.executable, "-c", code, "build"], capture_output=True, text=True, env=env)
    assert first.returncode == 0, first.stderr[-2000:]
    assert (cache / ".versions").is_file()
    hit = subprocess.run([sys.executable, "-c", code, "hit"], capture_output=True, text=True, env=env)
    assert hit.returncode == 0, hit.stderr[-2000:]
    assert hit.stdout.splitlines() == ["jitlab.jit.engines.nvrtc", "none"]


def test_host_math_and_float_constants_compile_with_nvrtc(tmp_path):
    """``M_PI`` with no include and ``FLT_MAX``/``DBL_EPSILON`` from ``<cfloat>``/``<float.h>`` compile with
    NVRTC, as nvcc's implicit host ``<math.h>`` and the host's ``<cfloat>`` allow: not an nvcc fallback."""
    p = tmp_path / "limits.cu"
    p.write_text("""#include <cfloat>
#include <float.h>
__global__ void clamp_gelu(float* y, const float* x, double* eps, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float hi = -FLT_MAX;
    if (i < n) hi = fmaxf(hi, 0.5f * x[i] * (1.0f + tanhf(sqrtf(2.0f / M_PI) * x[i])));
    if (i < n) y[i] = fminf(hi, FLT_MAX);
    if (i == 0) eps[0] = DBL_EPSILON + FLT_EPSILON + FLT_MIN + DBL_MIN;
}
""")
    b = jitlab.build(p, compile_only=True, arch="sm_90")
    assert b.engine == "nvrtc" and b.notes == []


def test_an_edit_reads_nvrtcs_precompiled_header_and_makes_the_same_cubin(scale, cache, monkeypatch):
    """NVRTC precompiles the text before the user's code (its builtins and jitlab's header) on a process's first
    compile and reads it on the next edit (the file is not written again): a fifth of a kernel-only edit. The
    CUBIN is byte for byte the one made without it, and the build log has neither NVRTC's notes about it nor its
    warning that the ``#line`` naming the user's file ends it."""
    from jitlab.jit.engines import nvrtc_pch

    _nvrtc(scale, arch="sm_90")
    made = {p: p.stat().st_mtime_ns for p in nvrtc_pch._root().rglob("*.pch")}
    assert made
    scale.write_text(SCALE.replace("SCALE", "3.0f"))
    edited = _nvrtc(scale, arch="sm_90")
    assert {p: p.stat().st_mtime_ns for p in nvrtc_pch._root().rglob("*.pch")} == made
    log = (edited.artifact.parent / "build.log").read_text()
    assert "ptxas info" in log and "precompiled" not in log and "20283" not in log and "629" not in log
    monkeypatch.setattr(nvrtc_pch, "fields", lambda folder, given: given)
    monkeypatch.setenv("JITLAB_CACHE_DIR", str(cache.parent / "without"))
    plain = _nvrtc(scale, arch="sm_90")
    assert not plain.cached and plain.artifact.read_bytes() == edited.artifact.read_bytes()


PCH_FOLDERS = """
import os, sys
from jitlab.jit.engines import nvrtc_pch

class Options:  # what cuda.core's ProgramOptions has for it
    __dataclass_fields__ = {"pch": None, "pch_dir": None, "pch_messages": None}

with nvrtc_pch.borrowed("13.0", Options, "k") as a, nvrtc_pch.borrowed("13.0", Options, "k") as b:
    assert a != b and a.is_dir() and b.is_dir()  # two compiles at once: two folders
with nvrtc_pch.borrowed("13.0", Options, "k") as again, nvrtc_pch.borrowed("13.0", Options, "other") as other:
    assert again == a and other not in (a, b)  # one edit after another: the same folder; each name its own
with nvrtc_pch.borrowed("12.4", Options, "k") as old:
    assert old is None  # NVRTC before 12.8 has no -pch
pid = os.fork()
if pid == 0:
    sys.exit(0)  # a forked child's exit hooks leave the folder
os.waitpid(pid, 0)
assert a.is_dir()
print(a.parent)
"""


def test_the_precompiled_headers_folders_are_one_per_compile_at_once_and_go_with_their_process():
    """Two compiles at once in one process borrow two folders (neither reads a file the other writes), the next
    edit gets the last one back, and another snippet has folders of its own; the folders go when the process
    that made them exits, not when a forked child does."""
    out = subprocess.run([sys.executable, "-c", PCH_FOLDERS], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    root = Path(out.stdout.strip())
    assert root.name.startswith("jitlab-nvrtc-pch-") and not root.exists()
