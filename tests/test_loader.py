"""The loaded module: snippet functions named like the module's own attributes stay reachable (CPU)."""

from __future__ import annotations

import pytest

import jitlab

SHADOWING = """\
int build(int x) { return x + 1; }
int functions(int x) { return x + 2; }
int fn(int x) { return x + 3; }
int twice(int x) { return 2 * x; }
"""


@pytest.fixture
def shadowing(cache, write):
    """A loaded kernel-only C++ snippet with functions called build, functions, fn and twice."""
    return jitlab.load(write("names.cpp", SHADOWING))


def test_the_modules_own_attributes_keep_working(shadowing):
    """`m.build` stays the Build and `m.functions` the names, though the snippet defines both as functions."""
    assert isinstance(shadowing.build, jitlab.Build) and shadowing.build.cached is False
    assert shadowing.functions == ["build", "functions", "fn", "twice"]


def test_every_function_is_an_item_and_fn_finds_it(shadowing):
    """`m["build"]`, `m.fn("functions")` and `m["fn"]` call the snippet's functions; `m.twice` is `m["twice"]`."""
    assert shadowing["build"](1) == 2 and shadowing.fn("functions")(1) == 3 and shadowing["fn"](1) == 4
    assert shadowing.twice is shadowing["twice"] and shadowing.twice(5) == 10
    assert shadowing.shadowed == ["build", "functions", "fn"]


def test_repr_says_how_to_reach_a_shadowed_function(shadowing):
    """The module's repr names `["build"]` and `.fn("build")` for the function its own `.build` shadows."""
    text = repr(shadowing)
    assert "call it as ['build'](...) or .fn('build')(...)" in text and "['twice']" not in text


def test_an_unknown_item_names_the_closest_function(shadowing):
    """`m["twic"]` is a KeyError that suggests `twice`; `in` tests names and the module is not iterable."""
    with pytest.raises(KeyError, match="did you mean `twice`"):
        shadowing["twic"]
    assert "build" in shadowing and "twic" not in shadowing
    with pytest.raises(TypeError, match="not iterable"):
        iter(shadowing)


def test_a_module_whose_one_function_is_shadowed_is_still_callable(cache, write):
    """A snippet whose one function is `build`: calling the module calls it, and `m.build` is the Build."""
    m = jitlab.load(write("b.cpp", "int build(int x) { return x * 3; }\n"))
    assert m(2) == 6 and isinstance(m.build, jitlab.Build)


def test_a_function_named_like_a_python_keyword_is_an_item(cache, write):
    """`int lambda(int)` is `m["lambda"]`, and its help says to call it that way."""
    m = jitlab.load(write("kw.cpp", "int lambda(int x) { return x + 5; }\n"))
    assert m["lambda"](1) == 6 and "call it as module['lambda'](...)" in m["lambda"].__doc__
