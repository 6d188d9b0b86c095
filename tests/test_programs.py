"""Whole programs (a .cpp/.cu with int main): built through the cache, run in a child process with
their output streamed, exit status, arguments, stdin and a timeout; from Python, the CLI and %%cpp."""

from __future__ import annotations

import io
import subprocess
import sys
import time
from pathlib import Path

import pytest

import jitlab
from jitlab.errors import ArgumentError, CompileError, SnippetError
from jitlab.jit import builder
from jitlab.jit.flags import Options
from jitlab.worker import proc
from jitlab.worker.execute import run_program

ECHO = """\
#include <cstdio>
#include <cstdlib>
#include "greeting.h"
int main(int argc, char** argv) {
  std::printf("%s %d\\n", GREETING, argc - 1);
  for (int i = 1; i < argc; ++i) std::printf("arg %s\\n", argv[i]);
  char line[128];
  while (std::fgets(line, sizeof line, stdin)) std::printf("in %s", line);
  std::fprintf(stderr, "done\\n");
  return argc > 1 ? std::atoi(argv[argc - 1]) : 0;
}
"""


@pytest.fixture
def echo(write):
    """echo.cpp, a program that prints its arguments and stdin, beside the greeting.h it includes."""
    write("greeting.h", '#define GREETING "hello"\n')
    return write("echo.cpp", ECHO)


def test_runs_with_args_and_stdin(cache, echo, capfd):
    """A program gets its arguments and stdin; its output, exit status and stderr come back and are shown."""
    run = run_program(echo, ["a", "3"], stdin="x\ny\n")
    assert run.returncode == 3 and not run.ok
    assert run.stdout == "hello 2\narg a\narg 3\nin x\nin y\n"
    assert run.stderr == "done\n"
    out, err = capfd.readouterr()
    assert out == run.stdout
    assert "done" in err and "echo.cpp exited with status 3" in err
    assert "exited with status 3" in repr(run) and "built in" in repr(run)


def test_output_is_streamed_as_it_comes(cache, write, monkeypatch):
    """Each line reaches sys.stdout when the program prints it, not when it ends."""
    p = write("slow.cpp", "#include <cstdio>\n#include <unistd.h>\n"
              "int main() { std::printf(\"one\\n\"); usleep(1500000); std::printf(\"two\\n\"); return 0; }\n")
    builder.build(p, Options(mode="program"))  # the build's time is not the program's
    seen = []

    class Recorder:
        def write(self, text):
            seen.append((time.perf_counter(), text))

        def flush(self):
            pass

    monkeypatch.setattr("sys.stdout", Recorder())
    t0 = time.perf_counter()
    run = run_program(p)
    lines = [(t - t0, text) for t, text in seen]
    assert run.ok and "".join(x for _, x in lines) == "one\ntwo\n"
    first = next(t for t, x in lines if "one" in x)
    assert first < 1.0 < run.seconds, lines


def test_signal_is_said_plainly(cache, write):
    """A program killed by a signal reports which one."""
    run = run_program(write("crash.cpp", "#include <cstdlib>\nint main() { std::abort(); }\n"), echo=False)
    assert run.returncode < 0 and "SIGABRT" in run.status and not run.ok


def test_hanging_program_is_stopped_at_its_timeout(cache, write, capfd):
    """A program that hangs is killed at its timeout; the message names the limit and how to raise it."""
    p = write("hang.cpp", "#include <cstdio>\nint main() { std::printf(\"start\\n\"); std::fflush(stdout); for (;;) {} }\n")
    builder.build(p, Options(mode="program"))
    t0 = time.perf_counter()
    run = run_program(p, timeout=1)
    assert run.timed_out and time.perf_counter() - t0 < 5
    assert run.stdout == "start\n"
    err = capfd.readouterr().err
    assert "stopped after 1 s" in err and "timeout=" in err and "--timeout" in err


def test_compile_error_names_the_line(cache, write):
    """A compile error points at the program's own file and line, with a caret."""
    p = write("bad.cpp", "#include <cstdio>\nint main() {\n  int x = undefined_name;\n  return 0;\n}\n")
    with pytest.raises(CompileError) as e:
        run_program(p)
    assert f"{p}:3" in str(e.value) or "bad.cpp:3" in str(e.value)
    assert "undefined_name" in str(e.value) and "^" in str(e.value)


def test_cache_hit_compiles_nothing_and_an_edit_rebuilds(cache, echo):
    """The same program runs again from the cache; editing it or its header builds anew."""
    first = run_program(echo, echo=False)
    again = run_program(echo, echo=False)
    assert not first.build.cached and again.build.cached and again.build.folder == first.build.folder
    (echo.parent / "greeting.h").write_text('#define GREETING "bye"\n')
    edited = run_program(echo, echo=False)
    assert not edited.build.cached and edited.stdout.startswith("bye")
    echo.write_text(ECHO.replace("%s %d", "%s! %d"))
    assert run_program(echo, echo=False).stdout.startswith("bye! 0")


def test_user_file_is_only_read(cache, echo):
    """Building and running never changes the program's file."""
    before = (echo.read_bytes(), echo.stat().st_mtime_ns)
    run_program(echo, echo=False)
    assert (echo.read_bytes(), echo.stat().st_mtime_ns) == before


def test_bad_arguments_name_the_fix(cache, echo, write):
    """args as one string, a bad timeout or a file without main are refused with the fix."""
    with pytest.raises(ArgumentError, match=r"args=\['a', 'b'\]"):
        run_program(echo, "a b")
    with pytest.raises(ArgumentError, match="timeout=120"):
        run_program(echo, timeout=-1)
    with pytest.raises(SnippetError, match="jitlab.load"):
        run_program(write("lib.cpp", "int f(int x) { return x; }\n"))


def test_only_main_is_not_loadable(cache, write):
    """jitlab.load on a program with nothing but main says to run it instead."""
    with pytest.raises(SnippetError, match="run_program"):
        jitlab.load(write("m.cpp", "int main() { return 0; }\n"))


def test_program_functions_still_load(cache, write):
    """A program's host functions stay callable with jitlab.load; main is left out with a note."""
    m = jitlab.load(write("p.cpp", "int add(int a, int b) { return a + b; }\nint main() { return add(1, 2); }\n"))
    assert m.add(2, 3) == 5 and "main" in dict(m.build.plan.skipped)


def test_a_program_builds_through_the_one_entrance(cache, write):
    """jitlab.build(mode="program") builds the executable as run_program does (the same entry), and load refuses it."""
    p = write("m.cpp", "int main() { return 0; }\n")
    b = jitlab.build(p, mode="program")
    assert b.plan.kind == "program" and b.artifact.name == "program" and b.engine == "c++"
    assert builder.build(p, Options(mode="program")).cached
    with pytest.raises(jitlab.JitlabError, match="run_program"):
        jitlab.load(p, mode="program")


def test_cuda_program_links_without_a_gpu(cache, write):
    """A .cu program compiles and links with nvcc for a named arch, -lineinfo included."""
    p = write("hello.cu", "#include <cstdio>\n__global__ void hi() { printf(\"hi %d\\n\", threadIdx.x); }\n"
              "int main() { hi<<<1, 2>>>(); return (int)cudaDeviceSynchronize(); }\n")
    b = builder.build(p, Options(mode="program", arch=["sm_75"]))
    assert b.artifact.is_file() and "-lineinfo" in b.manifest.command
    assert "hi" in b.resources


def test_inspect_works_on_a_cuda_program(cache, write, jitlab_cli):
    """`jitlab inspect` reports a program's kernels like any snippet's."""
    p = write("fp.cu", "__global__ void fill(int* x, int n) { int i = threadIdx.x; if (i < n) x[i] = i; }\n"
              "void bench(void (*k)(int*, int), int* x) { k<<<1, 32>>>(x, 32); }\n"
              "int main() { int* x; cudaMalloc(&x, 128); bench(fill, x); return 0; }\n")
    r = jitlab_cli("inspect", p, "--arch", "sm_75")
    assert r.returncode == 0, r.stderr
    assert "fill [sm_75]" in r.stdout


def test_cli_exec_passes_args_and_exit_status(cache, echo, jitlab_cli, tmp_path):
    """`jitlab exec PATH --stdin FILE -- ARGS` runs the program; the command exits with its status."""
    (tmp_path / "in.txt").write_text("z\n")
    r = jitlab_cli("exec", echo, "--stdin", tmp_path / "in.txt", "--", "-v", "5")
    assert r.returncode == 5
    assert r.stdout == "hello 2\narg -v\narg 5\nin z\n"


def test_cli_exec_timeout_exits_124(cache, write, jitlab_cli):
    """A program stopped at `--timeout` makes `jitlab exec` exit 124, as timeout(1) does."""
    p = write("hang.cpp", "int main() { for (;;) {} }\n")
    r = jitlab_cli("exec", p, "--timeout", "1")
    assert r.returncode == 124 and "--timeout" in r.stderr


def test_cpp_cell_with_main_runs(ip, capfd):
    """A %%cpp cell with main is saved, built and run; its output shows in the cell and NAME is the run."""
    body = '#include <cstdio>\nint main() { std::printf("from the cell\\n"); return 0; }\n'
    ip.run_cell_magic("cpp", "hello --timeout 30", body)
    assert "from the cell" in capfd.readouterr().out
    run = ip.user_ns["hello"]
    assert run.ok and run.stdout == "from the cell\n"
    assert (ip.user_ns["hello"].build.plan.files[0].path.read_text()) == body


def test_cpp_cell_with_main_shows_errors_at_cell_lines(ip, capfd):
    """A program cell's compile error is shown at the cell's own line."""
    ip.run_cell_magic("cpp", "broken", "int main() {\n  return nope;\n}\n")
    out = capfd.readouterr().out
    assert "cell line 3" in out and "nope" in out


# --- nothing lost: every byte, the whole process group, arguments and stdin at the door ------------

#: A program that writes 12 MB (a million numbered lines of 12 bytes) as fast as it can, then exits.
BIG = """\
#include <cstdio>
int main() {
  for (int i = 0; i < 1000000; ++i) std::printf("line %06d\\n", i);
  return 0;
}
"""
BIG_OUT = "".join(f"line {i:06d}\n" for i in range(1000000))


def slow_read(pipe) -> bytes:
    """Everything from a pipe, read as a slow consumer would (a pager, a network): 32 KB every 10 ms,
    seconds for the 12 MB, so the program has long exited while most of its output is still on its way."""
    got = bytearray()
    while chunk := pipe.read1(32768):
        got += chunk
        time.sleep(0.01)
    return bytes(got)


def python_child(script: str, *argv) -> subprocess.Popen:
    """A Python process running ``script`` with this jitlab and this test's cache, stdout and stderr piped."""
    return subprocess.Popen([sys.executable, "-c", script, *map(str, argv)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=proc.python_env())


@pytest.mark.slow
def test_every_byte_reaches_a_slow_reader_and_the_result(cache, write):
    """run_program(echo=True) into a slow pipe writes all 12 MB there and keeps all of it in run.stdout,
    long after the program exited."""
    p = write("big.cpp", BIG)
    builder.build(p, Options(mode="program"))
    child = python_child("import sys, jitlab\n"
                         "run = jitlab.run_program(sys.argv[1], echo=True)\n"
                         "whole = ''.join(f'line {i:06d}\\n' for i in range(1000000))\n"
                         "print(len(run.stdout), run.stdout == whole, run.ok, file=sys.stderr)", p)
    got = slow_read(child.stdout)
    err = child.stderr.read().decode()
    assert child.wait() == 0, err
    assert len(got) == len(BIG_OUT) and got.decode() == BIG_OUT
    assert err.split() == [str(len(BIG_OUT)), "True", "True"], err


@pytest.mark.slow
def test_cli_exec_delivers_every_byte_to_a_slow_reader(cache, write):
    """`jitlab exec big | slow-reader` gets the whole output and exits 0."""
    p = write("big.cpp", BIG)
    builder.build(p, Options(mode="program"))
    child = python_child("import sys; from jitlab import cli; sys.exit(cli.main(['exec', sys.argv[1]]))", p)
    got = slow_read(child.stdout)
    err = child.stderr.read().decode()
    assert child.wait() == 0, err
    assert got.decode() == BIG_OUT


def test_a_forked_child_ends_with_the_run(cache, write, tmp_path):
    """A child the program forks (holding its stdout) is killed when the program exits: it never writes
    the file it would write a few seconds later, and it is gone when run_program returns."""
    later = tmp_path / "later.txt"
    p = write("forks.cpp", f"""\
        #include <cstdio>
        #include <unistd.h>
        int main() {{
          if (fork() == 0) {{
            std::printf("child %d\\n", (int)getpid());
            std::fflush(stdout);
            sleep(3);
            std::FILE* f = std::fopen("{later}", "w");
            std::fputs("still here", f);
            std::fclose(f);
            return 0;
          }}
          sleep(1);  // the child has printed its pid
          std::printf("parent done\\n");
          return 0;
        }}
        """)
    run = run_program(p, echo=False)
    assert run.ok and "parent done" in run.stdout, run
    pid = int(run.stdout.split("child ")[1].split()[0])
    deadline = time.monotonic() + 20
    while alive(pid) and time.monotonic() < deadline:  # before the fix it lives on until after its write
        time.sleep(0.1)
    assert not alive(pid) and not later.exists()


def alive(pid: int) -> bool:
    """Whether a process exists and has not ended (a zombie waiting for its reaper has ended)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def test_arguments_are_checked_at_the_door(cache, echo):
    """None, a NUL, an argument list longer than the system takes, or args that are not a list are
    refused before anything runs, each with what to pass instead."""
    with pytest.raises(ArgumentError, match=r"args\[1\] is None"):
        run_program(echo, ["a", None])
    with pytest.raises(ArgumentError, match="NUL"):
        run_program(echo, ["a\0b"])
    with pytest.raises(ArgumentError, match="stdin="):
        run_program(echo, ["x" * 200_000])
    with pytest.raises(ArgumentError, match="stdin="):
        run_program(echo, ["x" * 1000] * 5000)
    with pytest.raises(ArgumentError, match="list of arguments"):
        run_program(echo, 7)


def test_bytes_paths_and_numbers_reach_the_program_as_themselves(cache, echo):
    """bytes go through as their bytes (not b'...'), a Path as its text, a number as it is written."""
    run = run_program(echo, [b"raw", Path("some/file.txt"), 2.5, "0"], echo=False)
    assert run.stdout.splitlines()[1:5] == ["arg raw", "arg some/file.txt", "arg 2.5", "arg 0"], run.stdout


@pytest.mark.parametrize("make", [lambda p: open(p, "rb"), lambda p: open(p), lambda p: io.BytesIO(p.read_bytes()),
                                  lambda p: io.StringIO(p.read_text()), lambda p: p.read_bytes(),
                                  lambda p: bytearray(p.read_bytes())],
                         ids=["binary file", "text file", "BytesIO", "StringIO", "bytes", "bytearray"])
def test_stdin_from_a_file_object_or_bytes_is_fed(cache, echo, tmp_path, make):
    """stdin= a file object (binary or text), a BytesIO/StringIO, bytes or a bytearray: the program reads it all."""
    src = tmp_path / "in.txt"
    src.write_text("x\ny\n")
    data = make(src)
    run = run_program(echo, stdin=data, echo=False, timeout=10)
    if hasattr(data, "close"):
        data.close()
    assert run.ok and run.stdout.endswith("in x\nin y\n"), run


def test_stdin_of_another_kind_names_what_it_takes(cache, echo, tmp_path):
    """stdin= a path or a number is refused with the kinds it takes (a path is not read as its text)."""
    with pytest.raises(ArgumentError, match="open"):
        run_program(echo, stdin=tmp_path / "in.txt")
    with pytest.raises(ArgumentError, match="str, bytes"):
        run_program(echo, stdin=5)


@pytest.mark.slow
def test_output_held_by_an_escaped_process_is_said_to_be_incomplete(cache, write, jitlab_cli):
    """A child that leaves the run's group (setsid) and keeps stdout open cannot be waited for: the run says
    its output may be incomplete, is not ok, and `jitlab exec` exits 1 instead of 0."""
    p = write("escapes.cpp", """\
        #include <cstdio>
        #include <unistd.h>
        int main() {
          int ready[2];
          if (pipe(ready) != 0) return 2;
          if (fork() == 0) { setsid(); write(ready[1], "e", 1); sleep(3); return 0; }
          char c;
          if (read(ready[0], &c, 1) != 1) return 3;  // the child has left the group
          std::printf("parent done\\n");
          return 0;
        }
        """)
    run = run_program(p, echo=False)
    assert run.returncode == 0 and run.output_lost and not run.ok
    assert "may be incomplete" in run.status and run.stdout == "parent done\n"
    r = jitlab_cli("exec", p)
    assert r.returncode == 1 and "may be incomplete" in r.stderr


@pytest.mark.slow
def test_cli_exec_into_a_reader_that_stops_ends_quietly(cache, write):
    """`jitlab exec big | head -1`: the reader closes the pipe; jitlab exits 141 (SIGPIPE, as a shell's
    commands do) without a traceback."""
    p = write("big.cpp", BIG)
    builder.build(p, Options(mode="program"))
    child = python_child("import sys; from jitlab import cli; sys.exit(cli.main(['exec', sys.argv[1]]))", p)
    assert child.stdout.readline() == b"line 000000\n"
    child.stdout.close()
    err = child.stderr.read().decode()
    assert child.wait() == 141 and "Traceback" not in err, err
