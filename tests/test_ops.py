"""Operator snippets (TORCH_LIBRARY and its kin) on CPU: torch.ops end to end, edits reloaded in process, errors.

Every test registers in a namespace of its own (``jlt_<test>``): registrations live in the process. Tests that
load a snippet unchanged share it, at one path in the run's folder (``two_file_folder``, ``aten_snippet``): one
build for the run.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

import jitlab
from conftest import run_dir, run_file
from jitlab.jit import codegen, ops
from jitlab.jit.parse import parse_file

pytestmark = pytest.mark.slow  # host units compile on torch's precompiled headers

SCALE = """\
#include <torch/extension.h>

torch::Tensor scale_cpu(const torch::Tensor& x, double a) {
  return x * a + OFFSET;
}

TORCH_LIBRARY(NS, m) {
  m.def("scale(Tensor x, float a) -> Tensor");
}

TORCH_LIBRARY_IMPL(NS, CPU, m) {
  m.impl("scale", &scale_cpu);
}
"""

CUDA_PART = """\
#include <torch/extension.h>

__global__ void scale_kernel(const float* x, float a, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i];
}

torch::Tensor scale_cuda(const torch::Tensor& x, double a) {
  auto y = torch::empty_like(x);
  int n = x.numel();
  scale_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), a, y.data_ptr<float>(), n);
  return y;
}

TORCH_LIBRARY_IMPL(NS, CUDA, m) {
  m.impl("scale", &scale_cuda);
}
"""


def write(folder: Path, name: str, text: str, ns: str, offset: str = "0") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(text.replace("NS", ns).replace("OFFSET", offset))
    return path


@pytest.fixture(scope="module")
def two_file_folder(tmp_path_factory) -> Path:
    """SCALE (namespace jlt_scale) as scale.cpp beside its CUDA kernel, scale.cu, in the run's folder: the two-file
    test builds the folder, and it and the repr test load scale.cpp alone, one build of it for the run."""
    folder = run_dir(tmp_path_factory, "ops_two_files")
    run_file(folder, "scale.cpp", SCALE.replace("NS", "jlt_scale").replace("OFFSET", "0"))
    run_file(folder, "scale.cu", CUDA_PART.replace("NS", "jlt_scale"))
    return folder


@pytest.fixture(scope="module")
def aten_snippet(tmp_path_factory) -> Path:
    """SCALE in namespace aten, in the run's folder: the two tests of its refusal load this one build."""
    return run_file(run_dir(tmp_path_factory, "ops_aten"), "scale.cpp",
                    SCALE.replace("NS", "aten").replace("OFFSET", "0"))


def test_torch_library_op_edit_and_reload(use_shared_cache, tmp_path):
    """A TORCH_LIBRARY op runs through torch.ops, and an edit loaded again in process runs the new code."""
    path = write(tmp_path, "scale.cpp", SCALE, "jlt_e2e")
    m = jitlab.load(path)
    x = torch.arange(4.0)
    assert torch.equal(torch.ops.jlt_e2e.scale(x, 2.0), x * 2)
    assert m.scale is torch.ops.jlt_e2e.scale
    write(tmp_path, "scale.cpp", SCALE, "jlt_e2e", offset="100")
    m2 = jitlab.load(path)
    assert torch.equal(torch.ops.jlt_e2e.scale(x, 2.0), x * 2 + 100)
    assert torch.equal(m2.scale(x, 2.0), x * 2 + 100)


def test_the_operator_registry_unit_is_compiled_once_for_every_folder(use_shared_cache, tmp_path):
    """jitlab's registry unit (``jitlab_ops.cpp``) is its own code: a TORCH_LIBRARY snippet in another folder
    (other include folders) reuses its object instead of compiling it again."""
    first = jitlab.build(write(tmp_path / "a", "scale.cpp", SCALE, "jlt_reg_a"))
    second = jitlab.build(write(tmp_path / "b", "scale.cpp", SCALE, "jlt_reg_b", offset="1"))
    units = {u["name"]: u for u in second.manifest.units}
    assert "jitlab_ops.cpp" in {u["name"] for u in first.manifest.units}
    assert units["jitlab_ops.cpp"]["cached"] and not units["scale.cpp"]["cached"]


def test_reload_keeps_old_tensors_and_references(use_shared_cache, tmp_path):
    """Tensors an old version made survive its unloading; kept packets and overloads call the new code."""
    path = write(tmp_path, "scale.cpp", SCALE, "jlt_keep", offset="1")
    jitlab.load(path)
    packet, overload = torch.ops.jlt_keep.scale, torch.ops.jlt_keep.scale.default
    old = [packet(torch.ones(1000), 3.0) for _ in range(3)]
    write(tmp_path, "scale.cpp", SCALE, "jlt_keep", offset="2")
    jitlab.load(path)
    gc.collect()
    assert all(torch.equal(t, torch.full((1000,), 4.0)) for t in old)
    assert packet(torch.ones(2), 3.0).tolist() == [5.0, 5.0]
    assert overload(torch.ones(2), 3.0).tolist() == [5.0, 5.0]
    assert (old[0] + 1).sum().item() == 5000.0


def test_old_version_is_unloaded(use_shared_cache, tmp_path):
    """Loading an edit unregisters the old build, without a warning; its library stays mapped (a call in
    flight on another thread may still run its code)."""
    from jitlab.jit import oplib

    path = write(tmp_path, "scale.cpp", SCALE, "jlt_unmap")
    first = jitlab.load(path).build.artifact
    write(tmp_path, "scale.cpp", SCALE, "jlt_unmap", offset="7")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        second = jitlab.load(path).build.artifact
    assert first != second
    assert [lib.path for lib in oplib.active.values() if "jlt_unmap" in lib.namespaces] == [second]


def test_going_back_to_a_cached_version(use_shared_cache, tmp_path):
    """Reverting an edit reloads the earlier build from the cache and runs it again."""
    path = write(tmp_path, "scale.cpp", SCALE, "jlt_back")
    jitlab.load(path)
    write(tmp_path, "scale.cpp", SCALE, "jlt_back", offset="5")
    jitlab.load(path)
    write(tmp_path, "scale.cpp", SCALE, "jlt_back")
    m = jitlab.load(path)
    assert m.build.cached
    assert torch.ops.jlt_back.scale(torch.ones(1), 1.0).item() == 1.0


def test_repr_and_plan_list_the_ops(use_shared_cache, two_file_folder):
    """repr(module) lists each operator with its schema and the dispatch keys it has kernels for."""
    m = jitlab.load(two_file_folder / "scale.cpp")
    assert "ops: jlt_scale::scale(Tensor x, float a) -> Tensor [CPU]" in repr(m)
    assert m.functions == ["scale"]


FRAGMENT = """\
#include <torch/extension.h>
#include <tuple>

torch::Tensor add_(torch::Tensor& x, double v) { return x.add_(v); }

std::tuple<torch::Tensor, torch::Tensor> minmax(const torch::Tensor& x) {
  return {x.min(), x.max()};
}

TORCH_LIBRARY_FRAGMENT(NS, m) {
  m.def("add_(Tensor(a!) x, float v) -> Tensor(a!)");
}

TORCH_LIBRARY_FRAGMENT(NS, m) {
  m.def("minmax(Tensor x) -> (Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(NS, CPU, m) {
  m.impl("add_", &add_);
  m.impl("minmax", &minmax);
}
"""


def test_fragments_mutating_schema_and_tuple(use_shared_cache, tmp_path):
    """Two TORCH_LIBRARY_FRAGMENTs: an in-place op writes its argument, a tuple-returning op returns a tuple."""
    path = write(tmp_path, "frag.cpp", FRAGMENT, "jlt_frag")
    m = jitlab.load(path)
    x = torch.zeros(3)
    out = torch.ops.jlt_frag.add_(x, 2.5)
    assert x.tolist() == [2.5] * 3 and out.data_ptr() == x.data_ptr()
    assert torch.ops.jlt_frag.add_.default._schema.is_mutable
    lo, hi = m.minmax(torch.tensor([3.0, -1.0, 7.0]))
    assert (lo.item(), hi.item()) == (-1.0, 7.0)
    assert sorted(m.functions) == ["add_", "minmax"]


def test_two_file_layout_runs_its_cpu_part_and_compiles_its_cuda_part(use_shared_cache, two_file_folder):
    """A .cpp with schema and CPU kernel plus a .cu with the CUDA kernel: nvcc compiles both; the .cpp alone runs."""
    folder = two_file_folder
    b = jitlab.build(folder, compile_only=True, arch=["sm_75"])
    assert [o.describe() for o in b.plan.ops] == ["jlt_scale::scale(Tensor x, float a) -> Tensor [CPU, CUDA]"]
    assert {u["name"] for u in b.manifest.units} == {"scale.cpp", "scale.device.cu", "scale.host.cpp",
                                                      "jitlab_ops.cpp"}
    assert "scale_kernel" in b.resources
    m = jitlab.load(folder / "scale.cpp")
    assert m.scale(torch.ones(2), 3.0).tolist() == [3.0, 3.0]


STABLE = """\
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>

torch::stable::Tensor twice(torch::stable::Tensor x) {
  torch::stable::Tensor out = torch::stable::empty_like(x);
  const float* in = x.const_data_ptr<float>();
  float* o = out.mutable_data_ptr<float>();
  for (int64_t i = 0; i < x.numel(); ++i) o[i] = FACTOR * in[i];
  return out;
}

STABLE_TORCH_LIBRARY(NS, m) {
  m.def("twice(Tensor x) -> Tensor");
}

STABLE_TORCH_LIBRARY_IMPL(NS, CPU, m) {
  m.impl("twice", TORCH_BOX(&twice));
}
"""


@pytest.mark.skipif(not (Path(torch.__file__).parent / "include/torch/csrc/stable/library.h").is_file(),
                    reason="this torch has no stable-ABI library.h")
def test_stable_abi_op_edit_and_reload(use_shared_cache, tmp_path):
    """A STABLE_TORCH_LIBRARY op runs through torch.ops, and its edit replaces it in process."""
    path = tmp_path / "twice.cpp"
    path.write_text(STABLE.replace("NS", "jlt_stable").replace("FACTOR", "2"))
    jitlab.load(path)
    assert torch.ops.jlt_stable.twice(torch.arange(3.0)).tolist() == [0.0, 2.0, 4.0]
    path.write_text(STABLE.replace("NS", "jlt_stable").replace("FACTOR", "3"))
    jitlab.load(path)
    assert torch.ops.jlt_stable.twice(torch.arange(3.0)).tolist() == [0.0, 3.0, 6.0]


def test_schema_error_names_the_line_and_keeps_the_old_version(use_shared_cache, tmp_path):
    """A schema torch rejects is a SnippetError at its m.def line; the last good version still runs."""
    path = write(tmp_path, "scale.cpp", SCALE, "jlt_schema", offset="1")
    jitlab.load(path)
    path.write_text(path.read_text().replace("float a) -> Tensor", "flaot a) -> Tensor"))
    with pytest.raises(jitlab.SnippetError, match=r"operators of scale\.cpp:8 failed: unknown type specifier"):
        jitlab.load(path)
    assert torch.ops.jlt_schema.scale(torch.ones(1), 1.0).item() == 2.0


def test_kernel_signature_mismatch_is_an_error_not_an_abort(use_shared_cache, tmp_path):
    """A kernel whose signature does not match its schema raises (torch's message), the process lives on."""
    path = write(tmp_path, "scale.cpp", SCALE.replace("double a", "int64_t a"), "jlt_sig")
    with pytest.raises(jitlab.SnippetError, match=r"(?s)scale\.cpp:7, scale\.cpp:11 failed: Inferred.*float vs int.*fix"):
        jitlab.load(path)
    assert not hasattr(torch.ops.jlt_sig, "scale")


def test_namespace_owned_by_torch_is_refused(use_shared_cache, aten_snippet):
    """TORCH_LIBRARY(aten, m) is refused, naming torch as the owner and the fix; aten keeps working."""
    with pytest.raises(jitlab.SnippetError, match=r"namespace `aten` is already torch's own.*namespace of your own"):
        jitlab.load(aten_snippet)
    assert torch.ops.aten.add(torch.ones(1), torch.ones(1)).item() == 2.0


def test_a_refused_load_leaves_torchs_own_operators_alone(use_shared_cache, aten_snippet):
    """A TORCH_LIBRARY(aten) snippet, refused, leaves torch's operator objects exactly as they were (the
    same objects, the same state: torch keys tables by them)."""
    overload = torch.ops.aten.rnn_relu.input
    state = dict(vars(overload))
    with pytest.raises(jitlab.SnippetError, match="already torch's own"):
        jitlab.load(aten_snippet)
    assert torch.ops.aten.rnn_relu.input is overload
    assert vars(overload).keys() == state.keys() and all(vars(overload)[k] is v for k, v in state.items())


def test_second_snippet_of_one_namespace_is_refused(use_shared_cache, tmp_path):
    """A second snippet declaring a loaded snippet's TORCH_LIBRARY namespace is an error naming the first and
    the fix; the first keeps running, and reloading the first stays allowed."""
    first = write(tmp_path / "a", "scale.cpp", SCALE, "jlt_twice", offset="1")
    second = write(tmp_path / "b", "scale.cpp", SCALE, "jlt_twice", offset="2")
    jitlab.load(first)
    with pytest.raises(jitlab.SnippetError, match=rf"(?s)already defined by another loaded snippet, {first}.*"
                                                   r"namespace of its own.*TORCH_LIBRARY_FRAGMENT\(jlt_twice, m\)"):
        jitlab.load(second)
    assert torch.ops.jlt_twice.scale(torch.ones(1), 1.0).item() == 2.0
    write(tmp_path / "a", "scale.cpp", SCALE, "jlt_twice", offset="3")
    jitlab.load(first)
    assert torch.ops.jlt_twice.scale(torch.ones(1), 1.0).item() == 4.0


def test_other_host_functions_are_not_bound():
    """An operator snippet binds no pybind function: a kernel says which op it serves, a helper what to do."""
    path = Path(__file__).parent / "fixtures" / "ops_helper.cpp"
    plan = codegen.plan([parse_file(path)], "ops_helper")
    reasons = dict(plan.skipped)
    assert plan.exported == [] and plan.binds_itself
    assert reasons["scale_cpu"] == "the CPU kernel of jlt_helper::scale: call it through torch.ops"
    assert reasons["helper"] == ops.NOT_BOUND
    assert [u.name for u in plan.units] == ["ops_helper.cpp", "jitlab_ops.cpp"]


# SCALE with a slow kernel: calls are in flight when the reload comes.
# A kernel as slow as JLT_BUSY_SPIN says (read from the environment: one text, so both speeds share their builds).
BUSY = SCALE.replace("NS", "jlt_busy").replace(
    "  return x * a + OFFSET;",
    "  static const long spins = std::atol(std::getenv(\"JLT_BUSY_SPIN\") ? std::getenv(\"JLT_BUSY_SPIN\") : \"0\");\n"
    "  volatile long spin = 0;\n  for (long i = 0; i < spins; ++i) spin += i;\n  return x * a + OFFSET;")


RELOAD_UNDER_LOAD = """\
import sys, threading, time
from pathlib import Path
import torch, jitlab

text, path = sys.argv[1], Path(sys.argv[2])
path.write_text(text.replace("OFFSET", "0"))
jitlab.load(path)
x, stop, errors, calls = torch.ones(4096), threading.Event(), [], [0]

def train():  # a training loop on another thread: every call must return the old or the new result
    while not stop.is_set():
        try:
            y = torch.ops.jlt_busy.scale(x, 2.0)
            assert y[0].item() in (2.0, 3.0, 4.0, 5.0), y[0].item()
        except Exception as e:
            errors.append(repr(e))
        calls[0] += 1

thread = threading.Thread(target=train)
thread.start()
for offset in (1, 2, 3, 0, 1):
    path.write_text(text.replace("OFFSET", str(offset)))
    jitlab.load(path)
    assert torch.ops.jlt_busy.scale(x, 2.0)[0].item() == 2.0 + offset
    seen = calls[0]
    while calls[0] < seen + 20:  # the loop keeps calling the version just loaded
        time.sleep(0.01)
stop.set()
thread.join()
assert not errors, errors[:3]
print("reloads survived", calls[0], "calls")
"""


def test_reload_while_another_thread_calls_the_op(use_shared_cache, tmp_path):
    """Loading edits while a thread calls the op (a slow kernel, then an instant one, each in a new process)
    never kills the process; every call returns the old or the new result, and after each load the new one.
    The instant run's loads are cache hits: versions swap as fast as they load."""
    env = {**os.environ, "JITLAB_CACHE_DIR": str(use_shared_cache),
           "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    for spin in ("200000", "1"):
        child = subprocess.run([sys.executable, "-c", RELOAD_UNDER_LOAD, BUSY, str(tmp_path / "busy.cpp")],
                               capture_output=True, text=True, env={**env, "JLT_BUSY_SPIN": spin}, timeout=900)
        assert child.returncode == 0, (spin, child.returncode, child.stderr[-3000:])
        assert "reloads survived" in child.stdout, spin
