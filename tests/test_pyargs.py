"""Torch-style host functions keep their C++ parameter names and literal defaults in Python."""

from __future__ import annotations

import pytest
import torch

import jitlab
from jitlab.jit.binding import binding_unit
from jitlab.jit.parse import parse_file
from jitlab.jit.pyargs import pyargs, required_defaults

SCALE = """
    #include <torch/extension.h>
    #define FACTOR 4.0
    torch::Tensor scale(torch::Tensor x, double alpha = 2.0, int64_t times = 1, bool negate = false) {
        auto y = x * alpha * (double)times;
        return negate ? -y : y;
    }
    torch::Tensor shift(torch::Tensor x, double by = FACTOR, double again = 0.5) { return x + by + again; }
    torch::Tensor pick(torch::Tensor x, c10::optional<torch::Tensor> other = c10::nullopt) {
        return other.has_value() ? *other : x;
    }
"""


def _functions(write):
    return {fn.name: fn for fn in parse_file(write("scale.cpp", SCALE)).functions}


def test_literal_defaults_become_python_defaults(write):
    """Literal defaults (a number, a bool, nullopt for an optional) are bound as `pybind11::arg(...) = literal`."""
    fns = _functions(write)
    assert pyargs(fns["scale"]) == (', pybind11::arg("x"), pybind11::arg("alpha") = 2.0, '
                                    'pybind11::arg("times") = 1, pybind11::arg("negate") = false')
    assert pyargs(fns["pick"]) == ', pybind11::arg("x"), pybind11::arg("other") = pybind11::none()'
    assert required_defaults(fns["scale"]) == ""


def test_a_non_literal_default_stays_required_with_a_note(write):
    """A macro default is C++ only: the argument (and no later one) stays required, and the note names it."""
    fn = _functions(write)["shift"]
    assert pyargs(fn) == ', pybind11::arg("x"), pybind11::arg("by"), pybind11::arg("again") = 0.5'
    assert "`double by = FACTOR`" in required_defaults(fn) and "must pass" in required_defaults(fn)


@pytest.mark.slow
def test_defaults_and_keywords_work_from_python(use_shared_cache, write):
    """A torch-style snippet called with defaults left out, by keyword, and a non-literal default noted in the build."""
    m = jitlab.load(write("scale.cpp", SCALE))
    x = torch.ones(2)
    assert m.scale(x).tolist() == [2.0, 2.0]
    assert m.scale(x, 3.0, times=2).tolist() == [6.0, 6.0]
    assert m.scale(x=x, negate=True, alpha=0.5).tolist() == [-0.5, -0.5]
    assert m.shift(x, 1.0).tolist() == [2.5, 2.5]
    with pytest.raises(TypeError):
        m.shift(x)
    assert m.pick(x).tolist() == [1.0, 1.0] and m.pick(x, other=x * 3).tolist() == [3.0, 3.0]
    assert any("shift(): `double by = FACTOR`" in n for n in m.build.notes)


def test_the_generated_declaration_drops_default_arguments(write):
    """The binding unit declares `shift(torch::Tensor x, double by, double again)`: it cannot see `FACTOR`."""
    fns = _functions(write)
    unit = binding_unit([fns["shift"]])
    assert "torch::Tensor shift(torch::Tensor x, double by, double again);" in unit and "FACTOR" not in unit
