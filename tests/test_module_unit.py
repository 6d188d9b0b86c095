"""A split file's own PYBIND11_MODULE in a unit of its own: what each unit keeps, and when it stays one unit."""

from __future__ import annotations

import pytest

from jitlab.jit.module_unit import separate

HOST = """\
JITLAB_MINMAX(int, int, int)
#line 1 "snippet.cu"
#include <torch/types.h>
constexpr int kBlock = 256;
const float kScale = 2.0f;
struct Params { int n; };
static int helper(int n) { return n + 1; }
template <typename T> T twice(T x) { return x + x; }
__global__ void k(float* y, int n) ;
torch::Tensor scale(torch::Tensor x) {
  return x * kScale;
}
namespace ops {
torch::Tensor shift(torch::Tensor x) { return x + helper(1); }
}
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("scale", &scale, "x * 2");
  m.def("shift", &ops::shift);
}
"""


def test_module_block_and_bodies_go_to_their_units():
    """The host unit loses the module block; the module unit keeps it, with external functions' bodies
    made declarations and static, template and constant definitions as written; lines keep their numbers
    and jitlab's prelude (before the #line) is in both, unread."""
    functions, module = separate(HOST)
    assert functions.count("\n") == module.count("\n") == HOST.count("\n")
    assert functions.startswith("JITLAB_MINMAX(int, int, int)\n#line")
    assert module.startswith("JITLAB_MINMAX(int, int, int)\n#line")
    assert "PYBIND11_MODULE" not in functions and "return x * kScale;" in functions
    assert "m.def(\"scale\", &scale" in module and "return x * kScale;" not in module
    assert "torch::Tensor scale(torch::Tensor x) ;" in module
    assert "torch::Tensor shift(torch::Tensor x) ;" in module
    for kept in ("static int helper(int n) { return n + 1; }", "template <typename T> T twice(T x) { return x + x; }",
                 "const float kScale = 2.0f;", "struct Params { int n; };"):
        assert kept in module and kept in functions


@pytest.mark.parametrize("change", [
    ("const float kScale = 2.0f;", "float kScale = 2.0f;"),                  # one variable, two units
    ("const float kScale = 2.0f;", "static float kScale = 2.0f;"),           # two copies of it
    ("torch::Tensor scale(torch::Tensor x) {", "auto scale(torch::Tensor x) {"),  # needs its body
    ("struct Params { int n; };", "template <> float twice<float>(float x) { return x; }"),  # defined once
    ("PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {", "namespace b { PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {"),
    ("struct Params { int n; };", "DEFINE_OP(scale2);"),                     # a macro may define anything
    ("const float kScale = 2.0f;", "const char* kName = \"scale\";"),         # a pointer variable, external
    ('m.def("shift", &ops::shift);', 'm.def("helper", &helper);'),           # the module's own copy of it
])
def test_stays_one_unit_when_two_would_differ(change):
    """A mutable namespace-scope variable (a pointer to const too), an `auto` function, an explicit
    specialization, a macro call, a module naming a static function or a module block inside a namespace
    keep the file's host code in one unit."""
    old, new = change
    text = HOST.replace(old, new) + ("}\n" if new.startswith("namespace") else "")
    assert text != HOST and separate(text) is None
