"""What the compilers say about themselves is asked once and remembered across processes (jit/answers.py)."""

from __future__ import annotations

import os

import pytest

from jitlab.jit import answers


@pytest.fixture
def tool(tmp_path, cache):
    """A stand-in compiler that prints its version and counts its runs in ``runs.txt``; the cache folder made."""
    cache.mkdir()
    runs = tmp_path / "runs.txt"
    script = tmp_path / "fakecc"
    script.write_text(f"#!/bin/sh\necho run >> {runs}\necho 'fakecc 1.0'\n")
    script.chmod(0o755)
    answers._answers.cache_clear()
    yield script, lambda: len(runs.read_text().splitlines()) if runs.exists() else 0
    answers._answers.cache_clear()


def test_a_new_process_asks_the_tool_nothing(tool):
    """The answer is kept in the cache: a second process (the file read again) does not run the tool."""
    script, runs = tool
    assert answers.asked(str(script), ("--version",)) == "fakecc 1.0\n"
    answers._answers.cache_clear()  # a new process
    assert answers.asked(str(script), ("--version",)) == "fakecc 1.0\n"
    assert runs() == 1


def test_a_changed_tool_or_setting_is_asked_again(tool, monkeypatch):
    """A tool rewritten (its size or mtime) or another value of a variable it reads is asked again."""
    script, runs = tool
    answers.asked(str(script), ("--version",), ("CPATH",))
    st = script.stat()
    os.utime(script, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    answers._answers.cache_clear()
    answers.asked(str(script), ("--version",), ("CPATH",))
    monkeypatch.setenv("CPATH", "/elsewhere")
    answers.asked(str(script), ("--version",), ("CPATH",))
    assert runs() == 3


def test_an_answers_file_someone_else_could_write_is_not_read(tool, cache):
    """A world-writable (or linked) answers file is ignored: the tool is asked."""
    script, runs = tool
    answers.asked(str(script), ("--version",))
    (cache / answers.FILE).chmod(0o666)
    answers._answers.cache_clear()
    assert answers.asked(str(script), ("--version",)) == "fakecc 1.0\n"
    assert runs() == 2


def test_an_unreadable_answers_file_is_asked_again(tool, cache):
    """A corrupt answers file costs only the question, never a crash."""
    script, runs = tool
    (cache / answers.FILE).write_text("{not json")
    assert answers.asked(str(script), ("--version",)) == "fakecc 1.0\n"
    assert runs() == 1
