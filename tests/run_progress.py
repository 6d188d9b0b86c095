"""A pytest plugin: a line now and then with how many tests have run, how long it took and about how long is left.

pytest's own progress is a percentage after each row of dots; on a 2-core machine a row can take a minute and the
whole run a quarter of an hour. Every ``JITLAB_TEST_PROGRESS_EVERY`` seconds (default 60; 0: after every test,
``off``: never) the run's process (pytest-xdist's controller, or pytest alone) writes::

    jitlab tests: 812 of 1790 in 6 min 10 s, about 7 min left

The estimate is the pace of the last :data:`WINDOW` seconds applied to the tests left, so it moves as slow and
quick stretches pass: in a clean clone's run here the first minute's line said 4 min left of 13, the fifth's 12.

A run that leaves the ``slow`` tests out (``make test``: ``-m "not gpu and not slow"``) also ends with the tests
not marked slow that took over ``JITLAB_TEST_SLOW_OVER`` seconds (default 3) from setup to teardown, so that one
that grew slow is marked and ``make test`` stays quick::

    jitlab tests: 1 test not marked slow took over 3 s here; mark it @pytest.mark.slow (make test-slow runs it)
      4.2 s  tests/test_x.py::test_y

A test during which a torch header set appeared in the run's ``JITLAB_PCH_DIR`` is named apart, as the one that
made it (the tests after it share the set; marking it slow would pass the set to the next one).
"""

from __future__ import annotations

import collections
import os
import time

import pytest

#: Seconds of finished tests whose pace the estimate uses.
WINDOW = 120.0


def _minutes(seconds: float) -> str:
    m, s = divmod(int(seconds + 0.5), 60)
    return f"{m} min {s} s" if m else f"{s} s"


class Progress:
    """The counts and the clock of one run."""

    def __init__(self, config, every: float):
        self.config, self.every = config, every
        self.total, self.done = 0, 0
        self.start = self.last = time.monotonic()
        self.pace: collections.deque[tuple[float, int]] = collections.deque([(self.start, 0)])

    def pytest_collection_finish(self, session):
        self.total = self.total or len(session.items)

    def pytest_xdist_node_collection_finished(self, node, ids):
        self.total = max(self.total, len(ids))  # the controller collects nothing itself; each worker has all

    def pytest_runtest_logreport(self, report):
        if report.when != "teardown":
            return
        self.done += 1
        now = time.monotonic()
        self.pace.append((now, self.done))
        while len(self.pace) > 2 and now - self.pace[1][0] > WINDOW:
            self.pace.popleft()
        if now - self.last < self.every or self.done >= self.total:
            return
        self.last = now
        (t0, done0) = self.pace[0]
        left = (self.total - self.done) * (now - t0) / max(self.done - done0, 1)
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            if getattr(getattr(reporter, "_tw", None), "width_of_current_line", 0):
                reporter.write("\n")  # after a row's dots (ensure_newline knows only rows that name a file)
            reporter.write_line(f"jitlab tests: {self.done} of {self.total} in {_minutes(now - self.start)}, "
                                f"about {_minutes(left)} left")


def _folders(folder: str | None) -> set[str]:
    """The folders in ``folder`` (a set's, not its lock or the cache's tag); none where it is not one."""
    return {e.name for e in os.scandir(folder) if e.is_dir()} if folder and os.path.isdir(folder) else set()


class SetMakers:
    """In the process that runs the tests: a test during which a precompiled header set appeared in the run's
    folder (``JITLAB_PCH_DIR``) says so in its report; it paid for a set that the tests after it share."""

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item):
        folder = os.environ.get("JITLAB_PCH_DIR")
        before = _folders(folder)
        yield
        made = _folders(folder) - before
        if made:
            item.user_properties.append(("jitlab_header_sets", sorted(made)))


class SlowOnes:
    """The tests of a run without the slow ones that took over ``over`` seconds, named at the run's end. One
    that made a header set the run shares is named apart: marking it slow would only pass the set on."""

    def __init__(self, over: float):
        self.over = over
        self.took: dict[str, float] = collections.defaultdict(float)
        self.made: dict[str, list[str]] = {}

    def pytest_runtest_logreport(self, report):
        if "slow" not in report.keywords:
            self.took[report.nodeid] += report.duration
            for name, value in report.user_properties:
                if name == "jitlab_header_sets":
                    self.made[report.nodeid] = value

    def pytest_terminal_summary(self, terminalreporter):
        for n, sets in self.made.items():
            if self.took[n] > self.over:
                terminalreporter.write_line(f"jitlab tests: {n} made {', '.join(sets)} ({self.took[n]:.1f} s), "
                                            "shared by the tests after it")
        slow = sorted(((t, n) for n, t in self.took.items() if t > self.over and n not in self.made), reverse=True)
        if slow:
            one = len(slow) == 1
            terminalreporter.write_line(
                f"jitlab tests: {len(slow)} test{'' if one else 's'} not marked slow took over {self.over:g} s here; "
                f"mark {'it' if one else 'them'} @pytest.mark.slow (make test-slow runs {'it' if one else 'them'})")
            for t, n in slow:
                terminalreporter.write_line(f"  {t:.1f} s  {n}")


def pytest_configure(config):
    quick = "not slow" in (config.getoption("markexpr", "") or "")
    if quick and (hasattr(config, "workerinput") or not getattr(config.option, "numprocesses", None)):  # runs tests
        config.pluginmanager.register(SetMakers(), "jitlab-set-makers")
    if quick and not hasattr(config, "workerinput"):
        config.pluginmanager.register(SlowOnes(float(os.environ.get("JITLAB_TEST_SLOW_OVER", "3"))),
                                      "jitlab-slow-ones")
    every = os.environ.get("JITLAB_TEST_PROGRESS_EVERY", "60")
    if every == "off" or hasattr(config, "workerinput"):  # an xdist worker: its controller speaks
        return
    config.pluginmanager.register(Progress(config, float(every)), "jitlab-run-progress")
