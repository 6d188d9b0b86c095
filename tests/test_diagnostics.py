"""Compiler logs → diagnostics in the user's files: parse_log, render and compile_error on literal logs."""

from __future__ import annotations

import pickle
import re

import pytest

from jitlab.errors import CompileError, Diagnostic
from jitlab.jit.diagnostics import MAX_SHOWN, compile_error, parse_log, render

CU = """\
__global__ void k(float* y, int n) {
    int i = threadIdx.x;
    if (i < n) y[i] = xx;
}
"""

CPP = """\
int f() {
    return zz;
}
"""


@pytest.fixture
def cu(write):
    return write("k.cu", CU)


@pytest.fixture
def cpp(write):
    return write("k.cpp", CPP)


def nvcc_log(path, line=3, msg='identifier "xx" is undefined', src="    if (i < n) y[i] = xx;", col=23):
    """What cudafe++ prints: the message, the source line indented by 2, a caret line."""
    return f"{path}({line}): error: {msg}\n  {src}\n  {' ' * (col - 1)}^\n\n1 error detected in the compilation of \"{path}\".\n"


def test_nvcc_error_with_caret_column(cu):
    """An nvcc error gives path, line, and the column of the caret (the 2-space echo prefix removed)."""
    [d] = parse_log(nvcc_log(cu))
    assert d == Diagnostic(str(cu), 3, 23, "error", 'identifier "xx" is undefined')


def test_nvcc_error_with_diagnostic_number(cu):
    """nvcc's `error #20: msg` form parses the same, the number left out of the message."""
    [d] = parse_log(f"{cu}(3): error #20: identifier \"xx\" is undefined\n")
    assert (d.path, d.line, d.column, d.severity, d.message) == (str(cu), 3, None, "error", 'identifier "xx" is undefined')


def test_gcc_error(cpp):
    """A gcc `path:line:col: error:` line gives path, line and column."""
    log = f"{cpp}: In function 'int f()':\n{cpp}:2:12: error: 'zz' was not declared in this scope\n    2 |     return zz;\n      |            ^~\n"
    assert parse_log(log) == [Diagnostic(str(cpp), 2, 12, "error", "'zz' was not declared in this scope")]


@pytest.mark.parametrize("line", [
    "ptxas error   : Entry function '_Z1kPf' uses too much shared data (0x10000 bytes, 0xc000 max)",
    "ptxas fatal   : Unresolved extern function '_Z6helperv'",
    "/usr/bin/ld: k.o: in function `main': undefined reference to `helper()'",
    "nvcc fatal   : Unsupported gpu architecture 'compute_1'",
])
def test_ptxas_and_linker_errors_have_no_location(line):
    """ptxas, nvcc and linker errors are kept as location-less errors with their text."""
    [d] = parse_log("some noise\n" + line + "\nmore noise\n")
    assert d.severity == "error" and d.path == "" and d.line == 0 and d.message == line.strip()


def test_ld_returned_line_is_kept():
    """collect2's `ld returned 1 exit status` is an error."""
    [d] = parse_log("collect2: error: ld returned 1 exit status\n")
    assert d.severity == "error" and "ld returned 1 exit status" in d.message


def test_noise_is_ignored():
    """Build commands and ptxas info lines are not diagnostics."""
    log = ("[1/2] c++ -c main.cpp -o main.o\nptxas info    : Used 10 registers, used 0 barriers\n"
           "ninja: build stopped: subcommand failed.\n")
    assert parse_log(log) == []


def test_duplicates_collapse(cu):
    """The same error reported twice (e.g. once per arch) is one diagnostic."""
    log = nvcc_log(cu) + nvcc_log(cu)
    assert len(parse_log(log)) == 1
    err = compile_error("k.cu (nvcc, sm_75/sm_90)", log, {})
    assert err.summary.endswith('1 error: identifier "xx" is undefined') and err.excerpt.count("k.cu:3:") == 1


def test_render_quotes_line_with_caret(cu):
    """render shows path:line:col, the source line in a gutter, and a caret under the column."""
    [d] = parse_log(nvcc_log(cu))
    head, src, caret = render(d, {}).splitlines()  # reads the file from disk
    assert head.endswith('k.cu:3:23: error: identifier "xx" is undefined')
    assert src == "    3 |     if (i < n) y[i] = xx;"
    assert caret == "      | " + " " * 22 + "^" and caret.index("^") == src.index("xx")


def test_render_prefers_given_sources(cu):
    """render quotes the text it is given (the snippet as parsed), not the file on disk."""
    d = Diagnostic(str(cu), 1, None, "error", "boom")
    head, src = render(d, {str(cu): "given text line\n"}).splitlines()
    assert head.endswith("k.cu:1: error: boom") and src == "    1 | given text line"


def test_render_without_file_or_line_is_just_the_message(tmp_path):
    """A location-less error, or one in a file that is gone, renders as one line."""
    assert render(Diagnostic("", 0, None, "error", "ptxas fatal : bad"), {}) == "ptxas fatal : bad"
    gone = tmp_path / "gone.cu"
    out = render(Diagnostic(str(gone), 4, 2, "error", "oops"), {})
    assert out.endswith("gone.cu:4:2: error: oops") and "\n" not in out


def test_line_past_end_of_file_renders_head_only(cpp):
    """A line number beyond the file (stale log) gives the head line only, no crash."""
    out = render(Diagnostic(str(cpp), 99, 1, "error", "late"), {})
    assert out.endswith("k.cpp:99:1: error: late") and "\n" not in out


def test_warnings_come_after_errors(cu, cpp):
    """A warning logged before an error does not lead the excerpt: the error is shown first."""
    log = f"{cpp}:1:5: warning: unused variable 'w'\n" + nvcc_log(cu)
    err = compile_error("k.cu (nvcc, sm_90)", log, {})
    assert [d.severity for d in err.diagnostics] == ["warning", "error"]  # .diagnostics keeps log order
    assert err.summary.endswith('1 error: identifier "xx" is undefined')  # warnings are not counted as errors
    ex = err.excerpt
    assert ex.splitlines()[0].endswith('k.cu:3:23: error: identifier "xx" is undefined')
    assert "unused variable" not in ex or ex.index("unused variable") > ex.index('identifier "xx"')


def test_only_warnings_are_shown_when_there_are_no_errors(cpp):
    """A failed build whose log has only warnings shows the warnings (better than nothing), its last line first."""
    err = compile_error("k.cpp (c++)", f"{cpp}:2:5: warning: something odd\n", {})
    assert "k.cpp:2:5: warning: something odd" in err.excerpt
    assert err.summary.endswith("the build failed; the log ends: k.cpp:2:5: warning: something odd".replace("k.cpp", str(cpp)))


def test_more_than_three_errors_says_and_n_more(cpp):
    """Only the first MAX_SHOWN errors are rendered; the rest are counted."""
    log = "".join(f"{cpp}:{i}:1: error: problem {i}\n" for i in range(1, 6))
    err = compile_error("k.cpp (c++)", log, {})
    assert MAX_SHOWN == 3
    assert err.summary == "jitlab: k.cpp (c++) failed to compile: 5 errors: problem 1"
    for i in (1, 2, 3):
        assert f"problem {i}" in err.excerpt
    assert "problem 4" not in err.excerpt and "problem 5" not in err.excerpt
    assert "(and 2 more errors" in err.excerpt
    assert len(err.diagnostics) == 5


def test_exactly_one_more_error_is_singular(cpp):
    """Four errors: "and 1 more error", singular."""
    log = "".join(f"{cpp}:{i}:1: error: problem {i}\n" for i in range(1, 5))
    ex = compile_error("k.cpp (c++)", log, {}).excerpt
    assert "(and 1 more error" in ex and "1 more errors" not in ex


def test_str_of_compile_error_has_summary_excerpt_and_log_hint(cu):
    """str(CompileError) is the summary, the rendered errors, and where the full log is."""
    log = nvcc_log(cu)
    err = compile_error("k.cu (nvcc, sm_90)", log, {})
    assert isinstance(err, CompileError) and err.log == log
    lines = str(err).splitlines()
    assert lines[0] == 'jitlab: k.cu (nvcc, sm_90) failed to compile: 1 error: identifier "xx" is undefined'

    assert "    3 |     if (i < n) y[i] = xx;" in lines
    assert lines[-1].startswith("(") and ".log" in lines[-1]  # points at err.log for the rest
    assert str(pickle.loads(pickle.dumps(err))) == str(err)


def test_unparsable_log_shows_its_tail():
    """A failure with no recognizable diagnostic shows the end of the log instead of nothing."""
    log = "\n".join(f"line {i}" for i in range(100)) + "\nsomething went badly\n"
    err = compile_error("x.cpp (c++)", log, {})
    assert err.diagnostics == [] and err.summary.endswith("the build failed; the log ends: something went badly")
    assert "something went badly" in str(err) and "line 0\n" not in str(err)


def test_nvcc_detail_lines_keep_the_caret(write):
    """cudafe++ detail lines between the message and the echoed source do not lose the caret."""
    p = write("h.cu", "__global__ void k(__half* y, const __half* x, __half a, int n) {\n  int i = 0;\n  if (i < n) y[i] = x[i] * a;\n}\n")
    log = (f'{p}(3): error: no operator "*" matches these operands\n'
           "            operand types are: const __half * __half\n"
           "    if (i < n) y[i] = x[i] * a;\n"
           "                           ^\n")
    d = parse_log(log, {str(p): p.read_text()})[0]
    assert d.column == 26 and "operand types are: const __half * __half" in d.message
    src, caret = render(d, {}).splitlines()[-2:]
    assert src[caret.index("^")] == "*"


def test_tabs_are_columns_of_eight(write):
    """gcc counts a tab as 8 display columns; nvcc echoes it as one space: both carets land on the name."""
    p = write("t.cu", "__global__ void k(float* y) {\n\ty[0] = zz;\n}\n")
    text = p.read_text()
    nv = parse_log(f"{p}(2): error: identifier \"zz\" is undefined\n   y[0] = zz;\n          ^\n", {str(p): text})[0]
    gcc = parse_log(f"{p}:2:16: error: 'zz' was not declared in this scope\n")[0]
    for d in (nv, gcc):
        src, caret = render(d, {str(p): text}).splitlines()[-2:]
        assert src[caret.index("^"):].startswith("zz"), (d, src, caret)


def test_single_digit_arch_is_rejected():
    """'9' names no arch (sm_90 does): refused before nvcc sees it."""
    from jitlab.errors import ToolchainError
    from jitlab.jit.toolchain import normalize_arch

    with pytest.raises(ToolchainError):
        normalize_arch("9")


@pytest.mark.parametrize("log, cause", [
    ("[1/2] c++ -c main.cpp\nFAILED: main.o\nc++ '' -c main.cpp\nc++: error: : No such file or directory\n",
     "c++: error: : No such file or directory"),
    ("nvcc fatal   : '3 -Xptxas -O3': expected a number\n", "nvcc fatal   : '3 -Xptxas -O3': expected a number"),
    ("/usr/bin/ld: cannot find -lnosuch: No such file or directory\ncollect2: error: ld returned 1 exit status\n",
     "/usr/bin/ld: cannot find -lnosuch: No such file or directory"),
    ("g++: error: unrecognized command-line option '-fno-such'\n", "g++: error: unrecognized command-line option '-fno-such'"),
])
def test_the_first_line_names_a_driver_or_linker_cause(log, cause):
    """A build stopped by the compiler driver or the linker (a bad flag, a missing library) names that line first."""
    err = compile_error("k.cpp (c++)", log, {})
    assert re.fullmatch(r"jitlab: k\.cpp \(c\+\+\) failed to compile: \d errors?: " + re.escape(cause), err.summary)
