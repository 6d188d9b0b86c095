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
_CONFIG = None  # the session's config (pytest_configure), whose table the reports fill
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
    global _CONFIG
    _CONFIG = config
    config._swap_results = {}


def pytest_runtest_setup(item):
    global _calls
    _calls = 0


def _first_line(report) -> str:
    if report.skipped and isinstance(report.longrepr, tuple):
        return str(report.longrepr[2]).removeprefix("Skipped: ")
    crash = getattr(report.longrepr, "reprcrash", None)
    text = crash.message if crash is not None else str(report.longrepr or "")
    return text.strip().splitlines()[0][:300] if text.strip() else ""


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """The swapped calls of a test's call phase travel with its report (to pytest-xdist's controller too)."""
    report = (yield).get_result()
    if call.when == "call":
        report.user_properties.append(("swapped_calls", _calls))


def pytest_runtest_logreport(report):
    """Keep the outcome of the phase that decides the test: a failed setup, call or teardown, else the call.
    Under pytest-xdist the controller gets every worker's reports, so its table is the whole run's."""
    rows = _CONFIG._swap_results
    row = rows.setdefault(report.nodeid, {"test": report.nodeid.split("::")[-1], "outcome": "passed", "calls": 0,
                                          "reason": ""})
    if report.outcome != "passed" and row["outcome"] != "failed" or report.when == "call" and row["outcome"] == "passed":
        row.update(outcome=report.outcome, reason=_first_line(report))
    row["calls"] = dict(report.user_properties).get("swapped_calls", row["calls"])


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    rows = list(config._swap_results.values())
    if not rows or hasattr(config, "workerinput"):  # a pytest-xdist worker: the controller reports
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
