"""The reference contract (CPU): what a ``NAME.ref.py`` must and may say, and checking its versions."""

from __future__ import annotations

import pytest
import torch

from jitlab.errors import SnippetError
from jitlab.judge import refs

MINIMAL = '''
import torch
SIZES = [1, 7, 129]
def inputs(size, seed, device):
    return {"x": torch.arange(size, dtype=torch.float32) + seed}
def reference(inp):
    return inp["x"] * 2
def run(m, inp):
    return m(inp["x"])
'''


def _ref(tmp_path, extra: str = "", name: str = "k.ref.py") -> refs.Ref:
    path = tmp_path / name
    path.write_text(MINIMAL + extra)
    return refs.load(path)


def test_defaults_of_a_minimal_reference(tmp_path):
    """Without the optional names: seed 0, no tolerance override, one version, timed at the largest size."""
    ref = _ref(tmp_path)
    assert ref.seeds == [0] and ref.tolerance is None and ref.flops is None and ref.bytes_moved is None
    assert [v.name for v in ref.versions] == ["original"]
    assert ref.timed_sizes(ref.versions[0]) == [129] and ref.ab_size() == 129
    assert ref.timed_sizes(ref.versions[0], max_size=10) == [7]


def test_variants_bench_sizes_and_the_originals_cap(tmp_path):
    """VARIANTS add versions with VARIANT_SIZES; BENCH_SIZES are timed, the original only up to ORIGINAL_MAX_SIZE."""
    ref = _ref(tmp_path, '''
VARIANTS = {"fast": lambda m, inp: run(m, inp)}
VARIANT_SIZES = [7]
BENCH_SIZES = [100, 10_000]
ORIGINAL_MAX_SIZE = 1000
SEEDS = [0, 1]
''')
    original, fast = ref.versions
    assert (original.sizes, fast.sizes) == ([1, 7, 129], [7]) and ref.seeds == [0, 1]
    assert ref.timed_sizes(original) == [100] and ref.timed_sizes(fast) == [100, 10_000]
    assert [(v.name, size) for v, size in ref.bench_plan()] == [("original", 100), ("fast", 100), ("fast", 10_000)]
    assert ref.version("fast") is fast


def test_an_original_that_is_a_variant_is_one_version_named_both_ways(tmp_path):
    """`run = run6` style: the variant that is `run` is checked and timed once, as "original = fast"."""
    ref = _ref(tmp_path, '''
def slow(m, inp):
    return run(m, inp) + 0
VARIANTS = {"slow": slow, "fast": run}
VARIANT_SIZES = [7, 300]
ORIGINAL_MAX_SIZE = 10
''')
    assert [v.label for v in ref.versions] == ["original = fast", "slow"]
    original = ref.versions[0]
    assert original.sizes == [1, 7, 129, 300] and ref.version("fast") is original
    assert ref.timed_sizes(original) == [300]  # the cap is for a slow seed original, not a variant
    out = [(v.label, verdict.passed) for v, verdict in refs.check_each(lambda x: x * 2, ref, "cpu", name="k")]
    assert out == [("original = fast", True), ("slow", True)]


def test_an_unknown_version_lists_the_versions(tmp_path):
    """Asking for a version the ref does not have names the ones it has."""
    with pytest.raises(SnippetError, match=r"no version 'slow' \(versions: original\)"):
        _ref(tmp_path).version("slow")


def test_a_reference_without_a_required_name_says_what_it_needs(tmp_path):
    """A ref lacking run() is refused with the four required names."""
    path = tmp_path / "bad.ref.py"
    path.write_text(MINIMAL.replace("def run(m, inp):\n    return m(inp[\"x\"])\n", ""))
    with pytest.raises(SnippetError, match=r"defines no run; a reference needs SIZES, inputs"):
        refs.load(path)


def test_other_names_of_the_module_stay_reachable(tmp_path):
    """An exercise's TITLE or a lesson's helper is read through the Ref, as from the module."""
    ref = _ref(tmp_path, 'TITLE = "double it"\ndef shape_of(size):\n    return (size, 1)\n')
    assert ref.TITLE == "double it" and ref.shape_of(3) == (3, 1)
    with pytest.raises(AttributeError):
        ref.NOT_THERE


def test_check_each_checks_every_version_on_the_cpu(tmp_path):
    """check_each yields one verdict per version, in order, at each version's sizes and seeds."""
    ref = _ref(tmp_path, 'VARIANTS = {"wrong": lambda m, inp: inp["x"] * 3}\n')
    out = list(refs.check_each(lambda x: x * 2, ref, "cpu", name="k"))
    assert [(v.name, verdict.passed) for v, verdict in out] == [("original", True), ("wrong", False)]
    assert out[0][1].name == "k/original" and sorted({c.size for c in out[0][1].cases}) == [1, 7, 129]
    capped = list(refs.check_each(lambda x: x * 2, ref, "cpu", name="k", max_size=10, versions=ref.versions[:1]))
    assert sorted({c.size for c in capped[0][1].cases}) == [1, 7]


def test_a_variant_with_its_own_inputs_and_tolerance_is_checked_on_them(tmp_path):
    """VARIANT_INPUTS/VARIANT_TOLERANCE give one version other inputs (a bf16 kernel beside fp32 ones):
    check_each feeds it those, within its tolerance; the other versions keep the ref's."""
    extra = '''
SEEN = []
def inputs_half(size, seed, device):
    return {"x": (torch.arange(size, dtype=torch.float32) + seed).half()}
def run_half(m, inp):
    SEEN.append(inp["x"].dtype)
    return (m(inp["x"].float()) + 0.01).half()
VARIANTS = {"same": lambda m, inp: run(m, inp), "half": run_half}
VARIANT_INPUTS = {"half": inputs_half}
VARIANT_TOLERANCE = {"half": {"rtol": 0.0, "atol": 0.02}}
'''
    ref = _ref(tmp_path, extra)
    original, same, half = ref.versions
    assert same.inputs is original.inputs is ref.inputs and same.tolerance is None
    assert half.inputs is ref.module.inputs_half and half.tolerance == {"rtol": 0.0, "atol": 0.02}
    out = [(v.name, verdict.passed) for v, verdict in refs.check_each(lambda x: x * 2, ref, "cpu", name="k")]
    assert out == [("original", True), ("same", True), ("half", True)]
    assert set(ref.module.SEEN) == {torch.float16}
    tight = _ref(tmp_path, extra.replace('"atol": 0.02', '"atol": 0.001'), "t.ref.py")  # 0.01 off: now too much
    assert [verdict.passed for _, verdict in refs.check_each(lambda x: x * 2, tight, "cpu", name="k")] == [
        True, True, False]


def test_variant_inputs_for_an_unknown_version_are_an_error(tmp_path):
    """A VARIANT_INPUTS key that is not in VARIANTS (a typo) is named, with the versions there are."""
    with pytest.raises(SnippetError, match=r"VARIANT_INPUTS/VARIANT_TOLERANCE name 'hlaf', not in VARIANTS \(half\)"):
        _ref(tmp_path, '''
VARIANTS = {"half": run}
VARIANT_INPUTS = {"hlaf": inputs}
''')


def test_find_kernels_pairs_snippets_with_their_references(tmp_path):
    """Every snippet with a NAME.ref.py beside it is found; a named snippet without one is an error naming the file."""
    (tmp_path / "a.cu").write_text("__global__ void a() {}\n")
    (tmp_path / "a.ref.py").write_text(MINIMAL)
    (tmp_path / "lonely.cpp").write_text("void f() {}\n")
    assert [(k.name, k.path.name) for k in refs.find_kernels(tmp_path)] == [("a", "a.cu")]
    with pytest.raises(Exception, match=r"lonely.ref.py"):
        refs.find_kernels(tmp_path / "lonely.cpp")
    assert torch.equal(refs.load(tmp_path / "a.ref.py").reference({"x": torch.ones(2)}), torch.full((2,), 2.0))
