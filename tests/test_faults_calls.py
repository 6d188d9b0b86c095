"""Fault suite, calls and arguments (issue 11): what a kernel-only snippet's typed call does with
arguments a user gets wrong, on the CPU (two small C++ snippets, each built once with g++ through jitlab).

Scenarios, each with the outcome it must have:

1. autograd: a function writing into a tensor autograd needs. A tensor saved for backward and then
   written under ``no_grad`` (or through ``.detach()``) makes backward raise torch's "modified by an
   inplace operation"; one written while autograd records makes backward raise instead of giving a
   wrong gradient; a leaf that requires grad is refused (the fix: ``.detach()`` / ``torch.no_grad()``),
   but written under ``no_grad`` like an optimizer step; inputs (const pointers) keep their version.
2. An empty tensor for a pointer (torch gives every 0-element tensor a NULL address) is refused,
   naming the parameter, instead of crashing the process (checked in a subprocess, so a regression
   cannot take the session down).
3. C functions named ``lambda`` and ``None``, parameters named ``in``, ``from``, ``lambda`` and after
   the builtins the wrapper uses (``type``, ``isinstance``, ``getattr``) are callable.
4. A C++ default argument that is a plain literal is honoured; one that is not (a macro) must be
   passed, and leaving it out says so.
5. A string for a float is refused (no ``float("2.5")``), and so is a number that would overflow a
   float (1e40), a ``__half`` or a ``__nv_bfloat16``; ``float('inf')`` and ``nan`` pass.
6. Integers out of their C type's range, grids and blocks beyond CUDA's limits and a negative
   ``shared_mem`` are refused with the parameter named, never masked (kernels: the real generated
   wrapper of a parsed ``.cu`` kernel over a recording launcher, as no GPU is here).
7. A C++ exception in an isolated check is the category ``exception``, not ``mismatch``.
"""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap

import pytest
import torch

import jitlab
from jitlab import jobs, launch, parse

SNIPPET = """\
#include <cstdint>
#include <stdexcept>

// Writes 1 into y[0, n): an output.
void fill_ones(float* y, int n) { for (int i = 0; i < n; ++i) y[i] = 1.0f; }
// Sums x[0, n): an input only.
float total(const float* x, int n) { float s = 0; for (int i = 0; i < n; ++i) s += x[i]; return s; }

// Defaults: plain literals are honoured, a macro must be passed.
#define STEP 7
int add(int a, int b = 3) { return a + b; }
double mix(double a, float b = -1.5f, unsigned c = 0x10u, bool negate = false) {
    double r = a + b + c;
    return negate ? -r : r;
}
int step(int a, int s = STEP) { return a + s; }

float same_float(float x) { return x; }
double same_double(double x) { return x; }
int same_int(int x) { return x; }

void must_be_positive(int n) { if (n <= 0) throw std::invalid_argument("n must be positive"); }
"""

# Names Python cannot take as they are: a snippet of its own, so a failure here cannot hide the others.
NAMES = """\
// Python keywords as the function's and the parameters' names.
int lambda(int in, int from) { return in - from; }
int None(int lambda, int lambda_) { return 10 * lambda + lambda_; }
// The builtins the generated wrapper uses, as parameter names.
int shadow(int type, int isinstance, int getattr) { return 100 * type + 10 * isinstance + getattr; }
"""

# A reference for the isolated check of scenario 7: the original version throws a C++ exception,
# "wrong" returns a wrong result (a mismatch), "right" passes.
REFERENCE = """\
import torch

SIZES = [1, 4]


def inputs(size, seed, device):
    return {"x": torch.ones(size)}


def reference(inp):
    return inp["x"] * 2


def run(m, inp):
    m.must_be_positive(0)
    return inp["x"] * 2


VARIANTS = {"wrong": lambda m, inp: inp["x"] * 3, "right": lambda m, inp: inp["x"] * 2}
"""

KERNELS = """\
#include <cuda_fp16.h>
#include <cuda_bf16.h>
__global__ void count(int n) { }
__global__ void scale16(__half a, __nv_bfloat16 b, int n) { }
"""


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """A fresh JITLAB_CACHE_DIR for this module (the function-scoped ``cache`` of conftest, module-wide)."""
    mp = pytest.MonkeyPatch()
    d = tmp_path_factory.mktemp("faults_calls_cache")
    mp.setenv("JITLAB_CACHE_DIR", str(d))
    yield d
    mp.undo()


@pytest.fixture(scope="module")
def snippet(cache, tmp_path_factory):
    """The snippet file, with its ``.ref.py`` beside it."""
    d = tmp_path_factory.mktemp("faults_calls")
    (d / "faults_calls.ref.py").write_text(REFERENCE)
    p = d / "faults_calls.cpp"
    p.write_text(SNIPPET)
    return p


@pytest.fixture(scope="module")
def m(snippet):
    """The snippet, built once for the module."""
    return jitlab.load(snippet)


@pytest.fixture(scope="module")
def names(cache, tmp_path_factory):
    """The snippet of awkward names, built once for the module."""
    p = tmp_path_factory.mktemp("faults_names") / "faults_names.cpp"
    p.write_text(NAMES)
    return jitlab.load(p)


class Recorder:
    """A stand-in for a kernel's launcher with the shim's convention: records each launch, returns success."""

    def __init__(self):
        self.launches: list[tuple] = []

    def __call__(self, *args):
        self.launches.append(args)
        return 0


@pytest.fixture
def kernels(tmp_path, monkeypatch):
    """name → (typed call, recorder) for the kernels of a parsed ``.cu`` snippet, with no GPU needed."""
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)  # CPU torch: the wrapper's device query
    monkeypatch.setattr(launch, "_raw_stream_fn", lambda: (lambda dev: 0))
    p = tmp_path / "k.cu"
    p.write_text(KERNELS)
    out = {}
    for fn in parse.parse_file(p).functions:
        rec = Recorder()
        out[fn.name] = (launch.Callable(fn, None, "cuda", False, launcher=rec), rec)
    return out


# ---- 1. autograd ------------------------------------------------------------------------------
def test_write_into_a_saved_tensor_under_no_grad_makes_backward_raise(m):
    """exp saves its output; writing it afterwards bumps its version, so backward raises as torch's in-place ops make it."""
    x = torch.rand(4, requires_grad=True)
    y = x.exp()
    with torch.no_grad():
        m.fill_ones(y, 4)
    assert y.tolist() == [1.0] * 4
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


def test_write_through_detach_makes_backward_raise(m):
    """`.detach()` shares the version counter: the saved tensor's backward still notices the write."""
    x = torch.rand(4, requires_grad=True)
    y = x.exp()
    m.fill_ones(y.detach(), 4)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


@pytest.mark.parametrize("op", [torch.exp, lambda x: x * 2], ids=["exp (saves its output)", "mul (saves nothing)"])
def test_write_while_autograd_records_makes_backward_raise(m, op):
    """The call writes, and a backward through the write raises instead of returning a wrong gradient."""
    x = torch.rand(4, requires_grad=True)
    y = op(x)
    m.fill_ones(y, 3)
    assert y[:3].tolist() == [1.0] * 3
    with pytest.raises(RuntimeError, match=r"argument 1 `y` \(float\*\) was written in place .*no_grad"):
        y.sum().backward()
    assert x.grad is None


def test_leaf_requiring_grad_is_refused_with_the_fix(m):
    """As torch's in-place ops refuse it; the message names `.detach()` and `torch.no_grad()`."""
    w = torch.zeros(4, requires_grad=True)
    with pytest.raises(jitlab.ArgumentError, match=r"`y` .*leaf tensor that requires grad.*\.detach\(\).*torch\.no_grad\(\)"):
        m.fill_ones(w, 4)
    assert w.tolist() == [0.0] * 4


def test_view_of_a_leaf_requiring_grad_is_refused_with_the_fix(m):
    """Torch's own refusal for a view of such a leaf, as a jitlab error with the fix."""
    w = torch.zeros(4, requires_grad=True)
    with pytest.raises(jitlab.ArgumentError, match=r"`y` .*view of a leaf Variable.*\.detach\(\)"):
        m.fill_ones(w[:2], 2)


def test_leaf_is_written_under_no_grad_like_an_optimizer_step(m):
    """Under no_grad a parameter may be updated in place; its version goes up."""
    w = torch.zeros(4, requires_grad=True)
    before = w._version
    with torch.no_grad():
        m.fill_ones(w, 4)
    assert w.tolist() == [1.0] * 4 and w._version > before


def test_inputs_keep_their_version(m):
    """Only non-const pointers count as written: reading a saved tensor leaves backward intact."""
    x = torch.rand(4, requires_grad=True)
    y = x.exp()
    before = y._version
    assert m.total(y.detach(), 4) == pytest.approx(float(y.detach().sum()))
    assert y._version == before
    y.sum().backward()
    assert torch.allclose(x.grad, x.detach().exp())


# ---- 2. empty tensors -------------------------------------------------------------------------
def test_empty_tensor_for_a_pointer_is_refused_not_a_segfault(snippet, cache):
    """torch.empty(0) has a NULL address: a C++ call writing 4 elements into it crashed the process."""
    script = textwrap.dedent(f"""
        import torch, jitlab
        m = jitlab.load({str(snippet)!r})
        try:
            m.fill_ones(torch.empty(0), 4)
        except jitlab.ArgumentError as e:
            print(e)
    """)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"the call crashed the process (exit {r.returncode}): {r.stderr[-2000:]}"
    assert "fill_ones(): argument 1 `y` (float*) got an empty tensor (shape (0,))" in r.stdout
    assert "NULL pointer" in r.stdout and "skip the call" in r.stdout


def test_zero_element_slice_is_refused_too(m):
    """torch gives every 0-element tensor a NULL address, a slice of real memory included: refused even for n = 0."""
    base = torch.zeros(4)
    assert base[4:].data_ptr() == 0
    with pytest.raises(jitlab.ArgumentError, match=r"`y` \(float\*\) got an empty tensor \(shape \(0,\)\)"):
        m.fill_ones(base[4:], 0)


# ---- 3. names -----------------------------------------------------------------------------------
def test_functions_named_after_python_keywords_are_callable(names):
    """`lambda` and `None` are attributes reached with getattr; their docstrings say so."""
    assert getattr(names, "lambda")(5, 3) == 2
    assert getattr(names, "None")(1, 2) == 12
    assert getattr(names, "lambda").__name__ == "lambda"
    assert "getattr(module, 'lambda')" in getattr(names, "lambda").__doc__


def test_parameters_named_after_keywords_take_a_trailing_underscore(names):
    """`in`, `from`, `lambda` are passed positionally or as `in_`, `from_`, `lambda_` (and `lambda_` as `lambda__`)."""
    assert getattr(names, "lambda")(in_=5, from_=3) == 2
    assert getattr(names, "None")(lambda_=1, lambda__=2) == 12
    with pytest.raises(TypeError, match="'from_'"):
        getattr(names, "lambda")(5)


def test_parameters_named_after_the_wrappers_builtins(names):
    """`type`, `isinstance` and `getattr` as parameter names shadow nothing the wrapper uses."""
    assert names.shadow(1, 2, 3) == 123


# ---- 4. default arguments -----------------------------------------------------------------------
def test_literal_defaults_are_honoured(m):
    """`int b = 3`, `float b = -1.5f`, `unsigned c = 0x10u`, `bool negate = false`."""
    assert m.add(1) == 4
    assert m.add(1, 5) == 6
    assert m.mix(1.0) == 15.5
    assert m.mix(1.0, negate=True) == -15.5
    assert m.mix(1.0, 0.5, 2) == 3.5
    assert "b: int = 3" in m.add.__doc__


def test_default_that_is_not_a_literal_must_be_passed(m):
    """`int s = STEP` (a macro): leaving it out names the parameter and the fix; passing it works."""
    with pytest.raises(jitlab.ArgumentError, match=r"argument 2 `s` \(int\) was left out.*`STEP`.*pass the argument explicitly"):
        m.step(1)
    assert m.step(1, 7) == 8


def test_parser_keeps_the_default_as_written(tmp_path):
    """Param.default holds the C++ text; parameters without one have None."""
    p = tmp_path / "d.cpp"
    p.write_text("int f(int a, const float* x, float b = -1.5f, int c = N) { return a; }\n")
    (fn,) = parse.parse_file(p).functions
    assert [q.default for q in fn.params] == [None, None, "-1.5f", "N"]
    assert [q.name for q in fn.params] == ["a", "x", "b", "c"]


# ---- 5. floats ----------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["same_float", "same_double"])
def test_string_for_a_float_is_refused(m, name):
    """"2.5" is not a number, even though float("2.5") would parse it."""
    with pytest.raises(jitlab.ArgumentError, match=r"argument 1 `x` \((float|double)\) takes a float, got str '2.5'"):
        getattr(m, name)("2.5")


@pytest.mark.parametrize("value", [1e40, -1e39, 2**200])
def test_float_overflow_is_refused(m, value):
    """A finite number beyond float32's range would arrive as inf."""
    with pytest.raises(jitlab.ArgumentError, match=r"`x` \(float\) got .*too large for a float .*3\.4028235e\+38.*double"):
        m.same_float(value)


def test_float_edge_values_pass(m):
    """FLT_MAX, explicit infinities, NaN and doubles beyond float32 pass unchanged."""
    assert m.same_float(3.4028234663852886e38) == 3.4028234663852886e38
    assert m.same_float(float("inf")) == math.inf and m.same_float(-math.inf) == -math.inf
    assert math.isnan(m.same_float(float("nan")))
    assert m.same_double(1e300) == 1e300
    assert m.same_float(2) == 2.0


def test_half_and_bfloat16_overflow_are_refused(kernels):
    """__half holds up to 65504, __nv_bfloat16 up to about 3.39e38; inf passes as inf's bits."""
    call, rec = kernels["scale16"]
    with pytest.raises(jitlab.ArgumentError, match=r"`a` \(__half\) got 1000000.0, too large for a __half \(at most ±65504\)"):
        call(1e6, 1.0, 4, grid=1, block=32)
    with pytest.raises(jitlab.ArgumentError, match=r"`b` \(__nv_bfloat16\) got .*too large for a __nv_bfloat16"):
        call(1.0, 3.4e38, 4, grid=1, block=32)
    call(math.inf, -math.inf, 4, grid=1, block=32)
    assert rec.launches[-1][8:] == (0x7C00, 0xFF80, 4)


# ---- 6. ranges and launch limits --------------------------------------------------------------
def test_integer_out_of_its_c_range_is_refused(m):
    """2**40 for an int, -1 for an unsigned: refused with the range, never masked."""
    with pytest.raises(jitlab.ArgumentError, match=r"argument 1 `x` \(int\) must be in \[-2147483648, 2147483647\], got 1099511627776"):
        m.same_int(2**40)
    with pytest.raises(jitlab.ArgumentError, match=r"argument 3 `c` \(unsigned\) must be in \[0, 4294967295\], got -1"):
        m.mix(1.0, 0.5, -1)


@pytest.mark.parametrize("config, message", [
    (dict(grid=2**40, block=256), r"grid=1099511627776: grid.x = 1099511627776 is more than CUDA allows \(2147483647\); .*grid-stride"),
    (dict(grid=2**31, block=256), r"grid.x = 2147483648 is more than CUDA allows"),
    (dict(grid=(1, 65536), block=256), r"grid.y = 65536 is more than CUDA allows \(65535\); put the long dimension in grid x"),
    (dict(grid=(1, 1, 70000), block=256), r"grid.z = 70000 is more than CUDA allows \(65535\)"),
    (dict(grid=1, block=1025), r"block.x = 1025 is more than CUDA allows \(1024\)"),
    (dict(grid=1, block=(1, 1, 65)), r"block.z = 65 is more than CUDA allows \(64\)"),
    (dict(grid=1, block=(32, 32, 2)), r"2048 threads per block \(32 x 32 x 2\), CUDA allows at most 1024"),
    (dict(grid=1, block=256, shared_mem=-1), r"shared_mem=-1: give the dynamic shared memory per block in bytes"),
    (dict(grid=1, block=256, shared_mem=2**32), r"shared_mem=4294967296"),
    (dict(grid=0, block=256), r"grid=0: give a positive int"),
])
def test_launch_configuration_beyond_cuda_limits_is_refused(kernels, config, message):
    """Each limit is checked before the launch; nothing reaches the launcher."""
    call, rec = kernels["count"]
    with pytest.raises(jitlab.ArgumentError, match=r"count\(\): .*" + message):
        call(4, **config)
    assert rec.launches == []


def test_launch_configuration_at_cuda_limits_passes(kernels):
    """The largest legal grid and block reach the launcher unchanged, tuples checked once and remembered."""
    call, rec = kernels["count"]
    for _ in range(2):
        call(4, grid=(2**31 - 1, 65535, 65535), block=(1024, 1, 1))
        call(4, grid=(8, 8), block=(16, 16, 4), shared_mem=2**32 - 1)
    assert rec.launches[0][:7] == (2**31 - 1, 65535, 65535, 1024, 1, 1, 0)
    assert rec.launches[1][:7] == (8, 8, 1, 16, 16, 4, 2**32 - 1)
    assert rec.launches[2:] == rec.launches[:2]


def test_kernel_integer_argument_out_of_range_is_refused(kernels):
    """A kernel's int parameter given 2**40 is refused, not masked to 0."""
    call, rec = kernels["count"]
    with pytest.raises(jitlab.ArgumentError, match=r"count\(\): argument 1 `n` \(int\) must be in"):
        call(2**40, grid=1, block=1)
    assert rec.launches == []


# ---- 7. check categories ----------------------------------------------------------------------
def _check(snippet, cache, variant):
    return jobs.run_job(jobs.Job("check", str(snippet), variant=variant, cache_dir=str(cache)))


def test_cpp_exception_in_a_check_is_category_exception(m, snippet, cache):
    """The original version throws std::invalid_argument: `exception`, with the C++ message and where."""
    out = _check(snippet, cache, "original")
    assert out.category == jobs.EXCEPTION == "exception"
    assert "must_be_positive() raised a C++ exception: n must be positive" in out.message
    assert out.where == "faults_calls/original at size 1, seed 0"
    assert "FAIL [exception]" in str(out)


def test_wrong_result_is_still_a_mismatch_and_right_one_passes(m, snippet, cache):
    """The new category takes nothing from the others."""
    assert _check(snippet, cache, "wrong").category == jobs.MISMATCH
    assert _check(snippet, cache, "right").category == jobs.PASS


def test_cpp_exception_outside_a_check_is_category_exception(m, snippet, cache):
    """A `run` job (the profiler's workload) that throws is `exception` too."""
    out = jobs.run_job(jobs.Job("run", str(snippet), variant="original", size=1, repeat=1, cache_dir=str(cache)))
    assert out.category == jobs.EXCEPTION
    assert "n must be positive" in out.message
