"""The test run's progress line (tests/run_progress.py): the count, the time spent and an estimate, from the process
that prints (pytest alone, or pytest-xdist's controller), never after the last test."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
SUITE = """
import time

def test_one():
    time.sleep(0.05)

def test_two():
    time.sleep(0.05)

def test_three():
    pass

def test_four():
    pass
"""


@pytest.mark.slow
@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["alone", "xdist"])
def test_each_finished_test_but_the_last_gets_a_line_with_the_count_and_an_estimate(tmp_path, workers):
    """With JITLAB_TEST_PROGRESS_EVERY=0, tests 1 to 3 of 4 each get one line: how many of how many, the time
    spent and about how long is left; the 4th none (the summary says the rest); xdist's workers print none."""
    (tmp_path / "test_tiny.py").write_text(SUITE)
    env = {**os.environ, "JITLAB_TEST_PROGRESS_EVERY": "0", "PYTHONPATH": str(HERE)}
    r = subprocess.run([sys.executable, "-m", "pytest", "-p", "run_progress", "-p", "no:cacheprovider", "-q",
                        *workers, "test_tiny.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = re.findall(r"^jitlab tests: (\d) of 4 in \d+ s, about \d+ s left$", r.stdout, re.M)
    assert lines == ["1", "2", "3"], r.stdout


def test_off_prints_no_line(tmp_path):
    """JITLAB_TEST_PROGRESS_EVERY=off: pytest's own output only."""
    (tmp_path / "test_tiny.py").write_text(SUITE)
    env = {**os.environ, "JITLAB_TEST_PROGRESS_EVERY": "off", "PYTHONPATH": str(HERE)}
    r = subprocess.run([sys.executable, "-m", "pytest", "-p", "run_progress", "-p", "no:cacheprovider", "-q",
                        "test_tiny.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "jitlab tests:" not in r.stdout, r.stdout


TIERED = """
import os
import time
import pytest

def test_quick():
    pass

def test_makes_a_set():
    os.mkdir(os.path.join(os.environ["JITLAB_PCH_DIR"], "torch-host-0123"))
    time.sleep(0.4)

def test_grew_slow():
    time.sleep(0.4)

@pytest.mark.slow
def test_marked():
    time.sleep(0.4)
"""


@pytest.mark.parametrize("marks, named", [("not slow", ["test_grew_slow"]), ("slow", []), ("", [])])
def test_a_run_without_the_slow_tests_names_the_ones_that_took_too_long(tmp_path, marks, named):
    """`-m "not slow"` (make test) ends naming each unmarked test over JITLAB_TEST_SLOW_OVER seconds, to be marked
    slow, and apart the one that made a header set in JITLAB_PCH_DIR; a run of the slow ones, or of everything,
    names none."""
    (tmp_path / "test_tiers.py").write_text(TIERED)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    slow: over ~2 s\n")
    (tmp_path / "pch").mkdir()
    env = {**os.environ, "JITLAB_TEST_PROGRESS_EVERY": "off", "JITLAB_TEST_SLOW_OVER": "0.2", "PYTHONPATH": str(HERE),
           "JITLAB_PCH_DIR": str(tmp_path / "pch")}
    r = subprocess.run([sys.executable, "-m", "pytest", "-p", "run_progress", "-p", "no:cacheprovider", "-q",
                        *(["-m", marks] if marks else []), "test_tiers.py"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    listed = re.findall(r"^  [\d.]+ s  test_tiers.py::(\w+)$", r.stdout, re.M)
    assert listed == named, r.stdout
    said = "jitlab tests: 1 test not marked slow took over 0.2 s here; mark it @pytest.mark.slow"
    assert (said in r.stdout) == bool(named), r.stdout
    made = "jitlab tests: test_tiers.py::test_makes_a_set made torch-host-0123 ("
    assert (made in r.stdout) == bool(named), r.stdout
