"""pytest plugin: code written for ``torch.utils.cpp_extension`` runs with jitlab's ``load``/``load_inline``.

Load it with ``-p jitlab_swap`` (``scripts/jitlab_swap`` on ``PYTHONPATH``; ``scripts/torch-ext-tests``
does both). Before any test module is imported, ``torch.utils.cpp_extension.load`` and ``load_inline`` are
replaced by ``jitlab.load`` and ``jitlab.load_inline``, so ``torch.utils.cpp_extension.load(...)`` and
``from torch.utils.cpp_extension import load_inline`` both reach jitlab. ``sitecustomize.py`` beside this
file does the same in Python subprocesses a test starts (they inherit ``PYTHONPATH`` and ``JITLAB_SWAP``).

``JITLAB_SWAP=torch`` keeps torch's own functions (the baseline run) and reports the same way.

jitlab drives torch's ``load_inline`` itself for some builds (kernel-only snippets with a launcher,
one-unit torch builds): a call made while a swapped call is running goes to torch's original.

At the end: one line per test (outcome, how many ``load``/``load_inline`` calls in the pytest process went
to the swapped functions (a test's subprocesses swap too, uncounted), and the first line of the failure or
the skip reason), also written as JSON with ``--swap-report PATH``. pytest's
own ``--junitxml`` carries the same call count as the property ``swapped_calls``.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import sys
from pathlib import Path

import pytest

MODE = os.environ.get("JITLAB_SWAP", "jitlab")
MODES = ("jitlab", "torch")
HERE = Path(__file__).resolve().parent

_calls = 0  # swapped calls made by the running test
_depth = 0  # > 0 while a swapped call runs: jitlab's own calls of torch's load_inline go to torch's


def _swapped(ours, theirs):
    """``theirs``' name and docstring, calling ``ours`` (torch's own when called from inside ``ours``)."""

    @functools.wraps(theirs)
    def call(*args, **kwargs):
        global _calls, _depth
        if _depth:
            return theirs(*args, **kwargs)
        _calls += 1
        _depth += 1
        try:
            return ours(*args, **kwargs)
        finally:
            _depth -= 1

    call.__jitlab_swap__ = MODE
    return call


def install(mode: str = MODE) -> None:
    """Swap jitlab's ``load``/``load_inline`` into ``torch.utils.cpp_extension`` (``mode="torch"``: count
    calls to torch's own, change nothing else). Calling it again does nothing."""
    if mode not in MODES:
        raise SystemExit(f"JITLAB_SWAP={mode!r}: use one of {', '.join(MODES)}")
    from torch.utils import cpp_extension

    if getattr(cpp_extension.load_inline, "__jitlab_swap__", None):
        return
    theirs_inline, theirs_load = cpp_extension.load_inline, cpp_extension.load
    if mode == "jitlab":
        import jitlab

        ours_inline, ours_load = jitlab.load_inline, jitlab.load
    else:
        ours_inline, ours_load = theirs_inline, theirs_load
    cpp_extension.load_inline = _swapped(ours_inline, theirs_inline)
    cpp_extension.load = _swapped(ours_load, theirs_load)


def pytest_addoption(parser):
    parser.addoption("--swap-report", default=None, help="write each test's outcome, swapped calls and reason as JSON")


def pytest_configure(config):
    if importlib.util.find_spec("expecttest") is None:  # torch's test base class needs it; a stand-in if absent
        sys.path.insert(0, str(HERE / "fallback"))
    install()
    config._swap_results = {}


def pytest_runtest_setup(item):
    global _calls
    _calls = 0


def _first_line(report, call) -> str:
    if report.skipped and isinstance(report.longrepr, tuple):
        return str(report.longrepr[2]).removeprefix("Skipped: ")
    if call.excinfo is not None:
        return call.excinfo.exconly().strip().splitlines()[0][:300]
    return ""


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Keep the outcome of the phase that decides the test: a failed setup, call or teardown, else the call."""
    report = (yield).get_result()
    row = item.config._swap_results.setdefault(item.nodeid, {"test": item.name, "outcome": "passed", "calls": 0,
                                                             "reason": ""})
    if report.outcome != "passed" and row["outcome"] != "failed" or call.when == "call" and row["outcome"] == "passed":
        row.update(outcome=report.outcome, reason=_first_line(report, call))
    row["calls"] = _calls
    if call.when == "call":
        item.user_properties.append(("swapped_calls", _calls))


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    rows = list(config._swap_results.values())
    if not rows:
        return
    tr = terminalreporter
    tr.section(f"torch.utils.cpp_extension.load/load_inline -> {MODE}'s")
    width = max(len(r["test"]) for r in rows)
    for r in rows:
        tr.write_line(f"{r['outcome']:<7} {r['calls']:>2} call(s)  {r['test']:<{width}}  {r['reason']}".rstrip())
    counts = {o: sum(r["outcome"] == o for r in rows) for o in ("passed", "failed", "skipped")}
    through = sum(r["outcome"] == "passed" and r["calls"] > 0 for r in rows)
    tr.write_line(f"{counts['passed']} passed ({through} of them through {MODE}'s load/load_inline), "
                  f"{counts['failed']} failed, {counts['skipped']} skipped")
    path = config.getoption("--swap-report")
    if path:
        Path(path).write_text(json.dumps({"mode": MODE, "counts": counts, "tests": rows}, indent=1) + "\n")
