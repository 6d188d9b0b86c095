"""`jitlab export`: a snippet as an installable package (setup.py, the seeds' way), built and imported without jitlab.

Fast tests check what is written; `slow` ones really build the C++ packages (torch headers, tens of
seconds each) and compile the CUDA ones up to the link (this machine's torch has no CUDA libraries);
the `gpu` test builds the CUDA packages, imports them and checks them against torch.
"""

from __future__ import annotations

import ast
import os
import shutil
import string
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest
import torch

from jitlab.errors import SnippetError
from jitlab.jit import messages, toolchain
from jitlab.jit.sources import collect_sources
from jitlab.tools import bindings
from jitlab.tools import export as export_module
from jitlab.tools.export import build_needs, export, module_name

ROOT = Path(__file__).resolve().parent.parent
KERNELS = ROOT / "kernels"
SHIPPED = sorted(p for p in KERNELS.iterdir() if p.suffix in (".cu", ".cpp") or (p.is_dir() and p.name[0] not in "._"))


def files_of(out: Path) -> set[str]:
    return {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()}


def build_env() -> dict:
    """The build's environment: this venv's tools (ninja) first, two jobs, no jitlab on the path.

    Host code is compiled unoptimised and without debug info (CFLAGS for c++, NVCC_APPEND_FLAGS for
    nvcc's host pass): these tests check that a package builds and behaves, not how fast it runs, and
    torch's headers at -O3 -g take a third longer on 2 cores.
    """
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["MAX_JOBS"] = "2"
    env["CFLAGS"] = f"{env.get('CFLAGS', '')} -O0 -g0".strip()
    env["NVCC_APPEND_FLAGS"] = f"{env.get('NVCC_APPEND_FLAGS', '')} -Xcompiler -O0".strip()
    return env


def run_without_jitlab(code: str, cwd: Path, path: Path | None = None, **env_vars: str) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter where ``import jitlab`` fails, with ``path`` on sys.path."""
    env = {**build_env(), **env_vars}
    if path is not None:
        env["PYTHONPATH"] = str(path)
    prelude = "import sys; sys.modules['jitlab'] = None\n"
    return subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(code)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def pip_install(pkg: Path, target: Path) -> None:
    """The README's command, into a folder: ``pip install --no-build-isolation``."""
    r = subprocess.run([sys.executable, "-m", "pip", "install", "--no-build-isolation", "--no-index", "--no-deps",
                        "--target", str(target), str(pkg)], env=build_env(), capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]


# ---- what is written ----------------------------------------------------------------------------
def test_torch_style_cpp_package_layout(tmp_path):
    """A torch-style C++ snippet: setup.py, pyproject, README, the package's __init__, the copy and one generated unit."""
    out = export(KERNELS / "square_matrix_cpu.cpp", tmp_path / "pkg")
    assert out == (tmp_path / "pkg").resolve()
    assert files_of(out) == {"setup.py", "pyproject.toml", "README.md", "square_matrix_cpu/__init__.py",
                             "csrc/square_matrix_cpu.cpp", "csrc/jitlab_module.cpp"}


def test_torch_style_module_unit_binds_every_host_function(tmp_path):
    """jitlab_module.cpp: torch headers, the user's .cpp #included, PYBIND11_MODULE with m.def through wrap_pybind_function."""
    out = export(KERNELS / "square_matrix_cpu.cpp", tmp_path / "pkg")
    unit = (out / "csrc" / "jitlab_module.cpp").read_text()
    assert unit.index("#include <torch/extension.h>") < unit.index('#include "square_matrix_cpu.cpp"')
    assert "#define CHECK_INPUT" in unit  # the CHECK_* macros jitlab predefines
    assert "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {" in unit
    assert 'm.def("square_matrix_cpu", torch::wrap_pybind_function(square_matrix_cpu), ' in unit


def test_cuda_functions_are_declared_for_the_module_unit(tmp_path):
    """square_matrix.cu: its host functions are declared in the C++ unit; the file is split as jitlab.load splits it:
    a device unit without torch's headers (for nvcc), a host unit with them, each at the file's lines."""
    out = export(KERNELS / "square_matrix.cu", tmp_path / "pkg")
    unit = (out / "csrc" / "jitlab_module.cpp").read_text()
    for name in ("square_matrix", "square_matrix1", "square_matrix2"):
        assert f"torch::Tensor {name}(torch::Tensor matrix);" in unit and f'm.def("{name}", ' in unit
    assert not (out / "csrc" / "jitlab_cuda.cu").exists()
    device = (out / "csrc" / "jitlab_square_matrix.device.cu").read_text()
    host = (out / "csrc" / "jitlab_square_matrix.host.cpp").read_text()
    assert "#include <torch" not in device and "__global__ void square_matrix_kernel(" in device
    assert "torch::Tensor square_matrix(" not in device and "torch::Tensor square_matrix(" in host
    assert host.index("#include <torch/types.h>") < host.index('#line 1 "square_matrix.cu"')
    assert "::jitlab_rt::launch(square_matrix_kernel, " in host
    original = (KERNELS / "square_matrix.cu").read_text().splitlines()
    for text in (device, host):  # every line of the user's file at its number, kept or blanked
        body = text.split('#line 1 "square_matrix.cu"\n', 1)[1].splitlines()
        kernel = next(i for i, line in enumerate(original) if "__global__ void square_matrix_kernel(" in line)
        assert body[kernel].startswith("__global__ void square_matrix_kernel(")
    setup = (out / "setup.py").read_text()
    assert ('sources=["csrc/jitlab_square_matrix.device.cu", "csrc/jitlab_square_matrix.host.cpp", '
            '"csrc/jitlab_module.cpp"]') in setup


def test_a_cuda_file_with_a_kernel_template_stays_one_unit(write, tmp_path):
    """A kernel template's instantiations are named only by the host code: that file stays in the one CUDA unit."""
    src = write("tpl.cu", """
        #include <torch/extension.h>
        template <typename T> __global__ void fill(T* y, T v, int n) { int i = threadIdx.x; if (i < n) y[i] = v; }
        torch::Tensor fill_ones(torch::Tensor y) {
            fill<float><<<1, 256>>>(y.data_ptr<float>(), 1.0f, y.numel());
            return y;
        }
        """)
    out = export(src, tmp_path / "pkg")
    assert sorted(p.name for p in (out / "csrc").glob("jitlab_*")) == ["jitlab_cuda.cu", "jitlab_module.cpp"]
    cuda = (out / "csrc" / "jitlab_cuda.cu").read_text()
    assert cuda.index("#include <torch/types.h>") < cuda.index('#include "tpl.cu"')


@pytest.mark.parametrize("snippet", SHIPPED, ids=lambda p: p.name)
def test_every_shipped_kernel_exports_with_its_files_unchanged(tmp_path, snippet):
    """Each kernel in kernels/ exports; csrc/ holds its sources and local headers byte for byte; setup.py parses."""
    out = export(snippet, tmp_path / "pkg")
    sources = collect_sources(snippet)
    for src in sources:
        assert (out / "csrc" / src.name).read_bytes() == src.read_bytes()
    for header in (snippet.glob("*.h") if snippet.is_dir() else []):
        assert (out / "csrc" / header.name).read_bytes() == header.read_bytes()
    setup = (out / "setup.py").read_text()
    ast.parse(setup)
    cuda = any(s.suffix == ".cu" for s in sources)
    assert ("CUDAExtension(" in setup) == cuda and ("CppExtension(" in setup) == (not cuda)
    assert "cmdclass={\"build_ext\": BuildExtension}" in setup


def test_setup_py_without_torch_names_no_build_isolation(tmp_path):
    """pip's isolated build has no torch: setup.py then exits with the command that works."""
    out = export(KERNELS / "add2_cpu.cpp", tmp_path / "pkg")
    code = "import sys, runpy; sys.modules['torch'] = None; sys.argv = ['setup.py', '--name']; runpy.run_path('setup.py', run_name='__main__')"
    r = subprocess.run([sys.executable, "-c", code], cwd=out, capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "pip install --no-build-isolation ." in r.stderr


def test_pyproject_and_readme_say_how_to_build(tmp_path):
    """pyproject.toml declares the setuptools backend; README gives the build command and a call per function."""
    out = export(KERNELS / "add2_cpu.cpp", tmp_path / "pkg")
    assert 'build-backend = "setuptools.build_meta"' in (out / "pyproject.toml").read_text()
    readme = (out / "README.md").read_text()
    assert "pip install --no-build-isolation ." in readme and "python setup.py build_ext --inplace" in readme
    assert "`pip install wheel` first" in readme
    assert "add2_cpu.add2_cpu(c, a, b, n)" in readme


def test_pyproject_declares_setuptools_and_wheel_but_not_torch(tmp_path):
    """[build-system] requires setuptools>=64 and wheel; torch is left out (an isolated build would compile against another torch)."""
    out = export(KERNELS / "add2.cu", tmp_path / "pkg")
    system = tomllib.loads((out / "pyproject.toml").read_text())["build-system"]
    assert system == {"requires": ["setuptools>=64", "wheel"], "build-backend": "setuptools.build_meta"}


def run_setup_py(out: Path, prelude: str, *argv: str) -> subprocess.CompletedProcess:
    """Run the package's setup.py with ``argv`` after ``prelude`` (which fakes the environment)."""
    code = f"{prelude}; import sys, runpy; sys.argv = ['setup.py', *{list(argv)!r}]; runpy.run_path('setup.py', run_name='__main__')"
    return subprocess.run([sys.executable, "-c", code], cwd=out, capture_output=True, text=True, timeout=120)


CPU_TORCH = "import torch, torch.utils.cpp_extension as ce; torch.version.cuda = None; ce.CUDA_HOME = None"
NO_NVCC = "import torch, torch.utils.cpp_extension as ce; torch.version.cuda = '12.8'; ce.CUDA_HOME = None"


@pytest.mark.slow
def test_cuda_setup_py_on_a_cpu_torch_says_so(tmp_path):
    """A CUDA package's setup.py with a CPU torch stops at once naming a CUDA build of torch, not torch's raw CUDA_HOME error."""
    out = export(KERNELS / "add2.cu", tmp_path / "pkg")
    r = run_setup_py(out, CPU_TORCH, "build_ext", "--inplace")
    assert r.returncode != 0, r.stdout
    assert "add2: this torch (" in r.stderr and "is a CPU build" in r.stderr and "a CUDA build of torch" in r.stderr
    assert "CUDA_HOME environment variable is not set" not in r.stderr
    assert not (out / "build").exists()  # stopped before compiling anything


@pytest.mark.slow
def test_cuda_setup_py_without_nvcc_names_the_toolkit(tmp_path):
    """A CUDA torch but no nvcc: setup.py names the CUDA toolkit of torch's major version and CUDA_HOME."""
    out = export(KERNELS / "square_matrix.cu", tmp_path / "pkg")
    r = run_setup_py(out, NO_NVCC, "build_ext", "--inplace")
    assert r.returncode != 0 and "square_matrix: nvcc not found" in r.stderr
    assert "CUDA toolkit 12.x" in r.stderr and "set CUDA_HOME" in r.stderr


@pytest.mark.slow
def test_cpp_setup_py_does_not_ask_for_cuda(tmp_path):
    """A C++ package's setup.py has no CUDA check: with a CPU torch it gets as far as setuptools (--name)."""
    out = export(KERNELS / "add2_cpu.cpp", tmp_path / "pkg")
    assert "CUDA_HOME" not in (out / "setup.py").read_text()
    r = run_setup_py(out, CPU_TORCH, "--name")
    assert r.returncode == 0 and r.stdout.strip().splitlines()[-1] == "add2_cpu", r.stderr


OLD_SETUPTOOLS = "import sys; sys.modules['setuptools.command.bdist_wheel'] = None; sys.modules['wheel'] = None"


@pytest.mark.slow
def test_setup_py_building_a_wheel_without_wheel_names_pip_install_wheel(tmp_path):
    """Setuptools < 70.1 (no bdist_wheel of its own) and no `wheel`: pip's dist_info step stops with `pip install wheel`."""
    out = export(KERNELS / "add2_cpu.cpp", tmp_path / "pkg")
    for command in ("dist_info", "bdist_wheel"):
        r = run_setup_py(out, OLD_SETUPTOOLS, command)
        assert r.returncode != 0 and "builds wheels only with the `wheel` package: `pip install wheel`" in r.stderr
    assert run_setup_py(out, OLD_SETUPTOOLS, "--name").returncode == 0  # no wheel is built: no need for it


def _versions(setuptools, wheel):
    return lambda dist: {"setuptools": setuptools, "wheel": wheel}.get(dist)


def test_build_needs_of_a_cuda_package_on_a_cpu_torch(monkeypatch):
    """A CUDA snippet needs nvcc and a CUDA torch; with a CPU torch and no nvcc, both are missing, each with its fix."""
    monkeypatch.setattr(torch.version, "cuda", None)
    monkeypatch.setattr(toolchain, "nvcc_path", lambda: None)
    monkeypatch.setattr(export_module, "_version_of", _versions((80, 9, 0), None))
    needs, missing = build_needs(KERNELS / "add2.cu")
    assert "nvcc" in needs and "a CUDA build of torch" in needs
    assert len(missing) == 2
    assert missing[0].startswith("a CUDA build of torch: this torch (") and "pytorch.org" in missing[0]
    assert missing[1].startswith("nvcc (looked in $CUDA_HOME/bin") and "set CUDA_HOME" in missing[1]


def test_build_needs_names_a_cuda_major_version_mismatch(monkeypatch):
    """torch built with CUDA 12.8 and nvcc 13.0: the mismatch is missing, naming a 12.x toolkit."""
    monkeypatch.setattr(torch.version, "cuda", "12.8")
    monkeypatch.setattr(toolchain, "nvcc_path", lambda: "/opt/cuda/bin/nvcc")
    monkeypatch.setattr(toolchain, "nvcc_version", lambda: "13.0.88")
    monkeypatch.setattr(export_module, "_version_of", _versions((80, 9, 0), None))
    _, missing = build_needs(KERNELS / "square_matrix.cu")
    assert missing == ["nvcc of torch's CUDA major version: nvcc is CUDA 13.0.88, torch was built with CUDA 12.8; "
                       "point CUDA_HOME at a CUDA 12.x toolkit"]


def test_build_needs_of_a_cpp_package(monkeypatch):
    """A C++ snippet needs no CUDA; old setuptools without `wheel` is missing `pip install wheel`, new setuptools is not."""
    monkeypatch.setattr(torch.version, "cuda", None)
    monkeypatch.setattr(export_module, "_version_of", _versions((80, 9, 0), None))
    needs, missing = build_needs(KERNELS / "add2_cpu.cpp")
    assert "nvcc" not in needs and "CUDA" not in needs and missing == []
    monkeypatch.setattr(export_module, "_version_of", _versions((65, 5, 0), None))
    _, missing = build_needs(KERNELS / "add2_cpu.cpp")
    assert missing == ["the `wheel` package, which setuptools 65.5.0 needs to build a wheel (else pip stops with "
                       "`invalid command 'bdist_wheel'`): `pip install wheel` first"]
    monkeypatch.setattr(export_module, "_version_of", _versions((65, 5, 0), (0, 45, 1)))
    assert build_needs(KERNELS / "add2_cpu.cpp")[1] == []


def test_own_pybind_module_keeps_its_name(tmp_path):
    """vector_add's PYBIND11_MODULE(example_kernels, m) is untouched: the extension is vector_add.example_kernels."""
    out = export(KERNELS / "vector_add", tmp_path / "pkg")
    binding = KERNELS / "vector_add" / "vector_add_binding.cpp"
    assert (out / "csrc" / binding.name).read_text() == binding.read_text()
    assert '"vector_add.example_kernels"' in (out / "setup.py").read_text()
    assert "from .example_kernels import *" in (out / "vector_add" / "__init__.py").read_text()
    assert "PYBIND11_MODULE" not in (out / "csrc" / "jitlab_module.cpp").read_text()


def test_cuda_snippet_binding_itself_needs_no_module_unit(tmp_path):
    """custom_operation.cu binds itself with TORCH_EXTENSION_NAME: setup.py compiles its split units alone, as `_C`
    (its module in the host unit, on torch/extension.h)."""
    out = export(KERNELS / "custom_operation.cu", tmp_path / "pkg")
    setup = (out / "setup.py").read_text()
    assert ('sources=["csrc/jitlab_custom_operation.device.cu", "csrc/jitlab_custom_operation.host.cpp"]' in setup
            and '"custom_operation._C"' in setup)
    host = (out / "csrc" / "jitlab_custom_operation.host.cpp").read_text()
    assert host.startswith("// ") and "#include <torch/extension.h>" in host and "PYBIND11_MODULE(" in host
    assert not (out / "csrc" / "jitlab_module.cpp").exists()
    assert "'custom_operation1'" in (out / "custom_operation" / "__init__.py").read_text()


def test_kernel_only_cuda_package(tmp_path):
    """add2.cu: the CUDA unit is the user's file plus codegen's launchers (no torch); the module wraps each kernel."""
    out = export(KERNELS / "add2.cu", tmp_path / "pkg")
    cuda = (out / "csrc" / "jitlab_cuda.cu").read_text()
    assert '#include "add2.cu"' in cuda and "#include <torch" not in cuda
    assert 'extern "C" int jitlab_launch_add2_kernel(' in cuda and 'extern "C" int jitlab_call_launch_add2(' in cuda
    module = (out / "csrc" / "jitlab_module.cpp").read_text()
    assert "#include <torch/extension.h>" not in module  # light headers: seconds, not tens of seconds
    assert 'm.def("add2_kernel", torch::wrap_pybind_function(add2_kernel_py)' in module
    assert 'py::kw_only(), py::arg("grid") = py::none(), py::arg("block") = py::none()' in module
    assert "c10::ScalarType::Float, c10::DeviceType::CUDA, true);" in module  # c: float*, an output
    assert "checked_int<int32_t>(a3, fn, 4, \"n\", \"int\")" in module
    assert "-U__CUDA_NO_HALF_OPERATORS__" in (out / "setup.py").read_text()  # as jitlab builds kernel-only units


def test_cpp_checks_raise_the_messages_jitlab_load_raises():
    """Each jit.messages text as the C++ wrappers' message arguments: with its fields as marker literals,
    the pieces concatenate to the text Python formats (chopped at spaces, nothing lost or added)."""
    texts = {n: t for n, t in vars(messages).items() if n.isupper() and isinstance(t, str)}
    assert {"DTYPE", "NOT_CUDA", "NOT_CPU", "WRITTEN_LEAF", "INT_RANGE", "SHARED_MEM", "LAUNCH_FAILED"} <= set(texts)
    for text in texts.values():
        fields = {f for _, f, _, _ in string.Formatter().parse(text) if f}
        cxx = bindings._cxx(text, **{f: f'"<{f}>"' for f in fields})
        assert "".join(ast.literal_eval(f"({cxx},)")) == text.format(**{f: f"<{f}>" for f in fields})


def test_half_scalar_crosses_as_its_bits(tmp_path):
    """scale_half.cu's __half scalar is a Python float in the wrapper, converted with c10::Half."""
    module = (export(KERNELS / "scale_half.cu", tmp_path / "pkg") / "csrc" / "jitlab_module.cpp").read_text()
    assert "c10::Half(static_cast<float>(a2)).x" in module


def test_local_headers_keep_their_layout(tmp_path, write):
    """A header included as ../common/ops.h is copied so that the same include finds it."""
    write("common/ops.h", "inline float twice(float v) { return 2 * v; }\n")
    src = write("kernels/dbl.cpp", '#include "../common/ops.h"\nvoid dbl(float* y, const float* x, int n) '
                                   "{ for (int i = 0; i < n; ++i) y[i] = twice(x[i]); }\n")
    out = export(src, tmp_path / "pkg")
    assert {"csrc/common/ops.h", "csrc/kernels/dbl.cpp"} <= files_of(out)
    assert '#include "kernels/dbl.cpp"' in (out / "csrc" / "jitlab_cpp.cpp").read_text()
    assert 'os.path.join(HERE, "csrc/kernels")' in (out / "setup.py").read_text()


def test_copies_keep_line_endings(tmp_path):
    """A file saved with CRLF line endings is copied byte for byte."""
    src = tmp_path / "crlf" / "k.cpp"
    src.parent.mkdir()
    src.write_bytes(b"// Windows\r\nvoid f(float* y) { y[0] = 1; }\r\n")
    out = export(src, tmp_path / "pkg")
    assert (out / "csrc" / "k.cpp").read_bytes() == src.read_bytes()


def test_template_kernel_is_listed_as_not_exported(tmp_path, write):
    """A template kernel cannot be bound: the README says so, the other kernel is exported."""
    src = write("t.cu", "template <int N> __global__ void k(float* y) { y[0] = N; }\n"
                        "__global__ void one(float* y) { k<1><<<1, 1>>>(y); }\n")
    out = export(src, tmp_path / "pkg")
    assert "`k`: template" in (out / "README.md").read_text()
    assert 'm.def("one", ' in (out / "csrc" / "jitlab_module.cpp").read_text()


# ---- names and folders --------------------------------------------------------------------------
def test_name_defaults_to_the_snippet_and_can_be_chosen(tmp_path):
    """The package is named after the snippet unless name= says otherwise."""
    assert module_name(KERNELS / "add2_cpu.cpp") == "add2_cpu"
    out = export(KERNELS / "add2_cpu.cpp", tmp_path / "pkg", name="fast_add")
    assert (out / "fast_add" / "__init__.py").is_file() and '"fast_add._C"' in (out / "setup.py").read_text()


@pytest.mark.parametrize("bad, fix", [("add-2", "--name add_2"), ("2fast", "--name k2fast"), ("class", "--name class_"),
                                      ("math", "--name math_kernels")])
def test_bad_names_are_refused_with_a_fix(tmp_path, bad, fix):
    """Names that are not importable (or would hide another module) are refused, naming --name and a name that works."""
    with pytest.raises(SnippetError, match="--name") as ei:
        export(KERNELS / "add2_cpu.cpp", tmp_path / "pkg", name=bad)
    assert fix in str(ei.value)
    assert not (tmp_path / "pkg").exists()


def test_snippet_name_that_is_not_an_identifier(tmp_path, write):
    """A file named add-two.cpp needs --name: the error says so."""
    src = write("add-two.cpp", "void f(float* y) { y[0] = 1; }\n")
    with pytest.raises(SnippetError, match=r"'add-two' \(the snippet's name; pass --name / name=\).*--name add_two"):
        export(src, tmp_path / "pkg")


def test_non_empty_folder_needs_force(tmp_path):
    """An existing non-empty folder is refused (naming --force); force=True rewrites the package's files and keeps the rest."""
    out = tmp_path / "pkg"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(SnippetError, match="--force"):
        export(KERNELS / "add2_cpu.cpp", out)
    assert files_of(out) == {"notes.txt"}
    export(KERNELS / "add2_cpu.cpp", out, force=True)
    (out / "setup.py").write_text("stale")
    export(KERNELS / "add2_cpu.cpp", out, force=True)
    assert "CppExtension" in (out / "setup.py").read_text() and (out / "notes.txt").read_text() == "mine"


def test_empty_existing_folder_is_fine(tmp_path):
    """An empty folder needs no --force."""
    (tmp_path / "pkg").mkdir()
    assert (export(KERNELS / "add2_cpu.cpp", tmp_path / "pkg") / "setup.py").is_file()


def test_folder_holding_the_snippet_is_refused(tmp_path, kernel_copy):
    """Exporting into the snippet's own folder could overwrite it: refused, even with force."""
    src = kernel_copy("add2_cpu.cpp")
    with pytest.raises(SnippetError, match="holds the snippet itself"):
        export(src, src.parent, force=True)
    assert src.read_text() == (KERNELS / "add2_cpu.cpp").read_text()


def test_files_are_readable_by_everyone_and_leave_no_temporaries(tmp_path, umask):
    """Atomic writes (temporary file + rename) leave no .tmp behind; under umask 022 files are 0644."""
    out = export(KERNELS / "add2_cpu.cpp", tmp_path / "pkg")
    assert not [p for p in out.rglob("*.tmp")]
    assert all((p.stat().st_mode & 0o777) == 0o644 for p in out.rglob("*") if p.is_file())


# ---- names and links: what a file name or a planted link can make the package do -------------------
#: A folder name that ran code in setup.py (include_dirs and the header comment) and __init__.py (docstring).
PAYLOAD = 'p"), __import__("os").mkdir("MARK"), ("\n__import__("os").mkdir("MARK2")\n"""'


def two_folders(tmp_path: Path, folder: str) -> list[Path]:
    """Two C++ files with a local header each, one in ``a/`` and one in ``folder``: both names reach the package."""
    files = []
    for sub, fn in (("a", "k"), (folder, "m")):
        (tmp_path / "src" / sub).mkdir(parents=True)
        (tmp_path / "src" / sub / f"{fn}.h").write_text("inline int one() { return 1; }\n")
        files.append(tmp_path / "src" / sub / f"{fn}.cpp")
        files[-1].write_text(f'#include "{fn}.h"\nint {fn}(int x) {{ return x + one(); }}\n')
    return files


def test_a_name_with_a_quote_or_a_newline_is_refused_before_anything_is_written(tmp_path):
    """A folder named with a quote and newlines is refused (C++ cannot quote it), naming the fix; no package is written."""
    with pytest.raises(SnippetError, match=r"cannot be written into the package's C\+\+.*rename it"):
        export(two_folders(tmp_path, PAYLOAD), tmp_path / "pkg", name="evil")
    assert not (tmp_path / "pkg").exists()


@pytest.mark.slow
def test_names_reach_setup_py_and_init_py_only_as_literals(tmp_path, monkeypatch):
    """Past the name check, the payload is text: running setup.py and importing the package makes no folder."""
    monkeypatch.setattr(export_module.package_files, "check_names", lambda paths: None)
    out = export(two_folders(tmp_path, PAYLOAD), tmp_path / "pkg", name="evil")
    r = run_setup_py(out, "import os", "--name")
    assert r.returncode == 0 and r.stdout.strip() == "evil", r.stderr
    (out / "evil" / "_C.py").write_text("def k(x): return x\ndef m(x): return x\n")  # the extension, unbuilt
    r = subprocess.run([sys.executable, "-c", "import evil; print(evil.__doc__)"], cwd=out, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0 and PAYLOAD in r.stdout, r.stderr
    assert not (out / "MARK").exists() and not (out / "MARK2").exists()


def test_an_awkward_but_legal_name_compiles_and_reads_back(tmp_path):
    """A folder named `it's \\N{x} #1 $y` exports; setup.py and __init__.py compile without warnings and keep it."""
    folder = "it's \\N{x} #1 $y"
    out = export(two_folders(tmp_path, folder), tmp_path / "pkg", name="awkward")
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        init = compile((out / "awkward" / "__init__.py").read_text(), "__init__.py", "exec")
        setup = ast.parse((out / "setup.py").read_text())
    assert f"{folder}/m.cpp" in init.co_consts[0]
    assert f"csrc/{folder}" in {n.value for n in ast.walk(setup) if isinstance(n, ast.Constant)}


def test_a_planted_file_link_in_a_force_target_is_refused_and_its_target_untouched(tmp_path):
    """`export --force` into a folder whose setup.py is a link: refused naming the link; the linked file keeps text and mode."""
    out, victim = tmp_path / "pkg", tmp_path / "victim.txt"
    out.mkdir()
    victim.write_text("precious")
    victim.chmod(0o600)
    (out / "setup.py").symlink_to(victim)
    with pytest.raises(SnippetError, match=f"{out / 'setup.py'} is a symbolic link .*never writes through"):
        export(KERNELS / "add2_cpu.cpp", out, force=True)
    assert victim.read_text() == "precious" and victim.stat().st_mode & 0o777 == 0o600
    assert os.listdir(out) == ["setup.py"]


def test_a_planted_folder_link_in_a_force_target_is_refused(tmp_path):
    """A `csrc` link to another folder is refused before anything is written; that folder stays empty."""
    out, elsewhere = tmp_path / "pkg", tmp_path / "elsewhere"
    out.mkdir()
    elsewhere.mkdir()
    (out / "csrc").symlink_to(elsewhere)
    with pytest.raises(SnippetError, match="csrc is a symbolic link"):
        export(KERNELS / "add2_cpu.cpp", out, force=True)
    assert os.listdir(elsewhere) == [] and os.listdir(out) == ["csrc"]


def test_a_link_made_after_the_check_fails_the_write(tmp_path, monkeypatch):
    """A folder link the up-front check misses (made meanwhile) is not followed: O_NOFOLLOW fails the write."""
    out, elsewhere = tmp_path / "pkg", tmp_path / "elsewhere"
    out.mkdir()
    elsewhere.mkdir()
    (out / "csrc").symlink_to(elsewhere)
    monkeypatch.setattr(Path, "is_symlink", lambda self: False)  # the check sees no link, as in a race
    with pytest.raises(SnippetError, match="csrc"):
        export(KERNELS / "add2_cpu.cpp", out, force=True)
    assert os.listdir(elsewhere) == []


def test_a_250_character_file_name_exports(tmp_path):
    """A snippet file named with 250 characters is copied under csrc/ (its temporary name still fits)."""
    src = tmp_path / ("k" * 246 + ".cpp")
    src.write_text("int seven() { return 7; }\n")
    out = export(src, tmp_path / "pkg", name="long_name")
    assert (out / "csrc" / src.name).read_text() == src.read_text()


@pytest.fixture
def umask():
    """umask(0o077) sets the process umask for this test; the old one comes back after it."""
    old = os.umask(0o022)
    yield os.umask
    os.umask(old)


def test_files_and_folders_follow_the_users_umask(tmp_path, umask):
    """Under umask 077 the package's files are 0600 and its folders 0700 (not everyone-readable 0644)."""
    umask(0o077)
    out = export(KERNELS / "add2_cpu.cpp", tmp_path / "pkg")
    assert {p.stat().st_mode & 0o777 for p in out.rglob("*") if p.is_file()} == {0o600}
    assert {p.stat().st_mode & 0o777 for p in [out, *out.rglob("*")] if p.is_dir()} == {0o700}


# ---- the command ------------------------------------------------------------------------------
@pytest.fixture
def jl(jitlab_cli):
    """jl("export", ..., cwd=folder) → `jitlab export ...` run in ``folder`` (in this process)."""
    return jitlab_cli


def test_cli_export_prints_the_folder_and_two_commands(tmp_path, jl):
    """`jitlab export PATH` writes ./NAME_package and prints it with the install and import commands."""
    r = jl("export", KERNELS / "add2_cpu.cpp", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    out = tmp_path / "add2_cpu_package"
    assert (out / "setup.py").is_file()
    assert str(out) in r.stdout
    assert f"pip install --no-build-isolation {out}" in r.stdout
    assert 'python -c "import add2_cpu; help(add2_cpu)"' in r.stdout
    assert "  building it needs:  a C++ compiler and torch" in r.stdout


def test_cli_export_of_a_cuda_snippet_says_it_needs_cuda(tmp_path, jl):
    """`jitlab export kernels/add2.cu` says building needs nvcc and a CUDA torch, and on a CPU torch that this one is not."""
    r = jl("export", KERNELS / "add2.cu", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    needs = next(line for line in r.stdout.splitlines() if line.startswith("  building it needs:"))
    assert "nvcc" in needs and "a CUDA build of torch" in needs
    if torch.version.cuda is None:
        assert f"  missing here:       a CUDA build of torch: this torch ({torch.__version__}) is CPU-only" in r.stdout


def test_cli_export_options_and_refusal(tmp_path, jl):
    """--out and --name are used; a second export into the same folder exits 1 naming --force; --force succeeds."""
    args = ["export", KERNELS / "square_matrix_cpu.cpp", "--out", tmp_path / "o", "--name", "sq"]
    assert jl(*args, cwd=tmp_path).returncode == 0
    assert (tmp_path / "o" / "sq" / "__init__.py").is_file()
    again = jl(*args, cwd=tmp_path)
    assert again.returncode == 1 and "--force" in again.stderr
    assert jl(*args, "--force", cwd=tmp_path).returncode == 0


def test_cli_bad_name_exits_1(tmp_path, jl):
    """A bad --name exits 1 with the fix on stderr and writes nothing."""
    r = jl("export", KERNELS / "add2_cpu.cpp", "--name", "my-kernels", cwd=tmp_path)
    assert r.returncode == 1 and "--name my_kernels" in r.stderr
    assert list(tmp_path.iterdir()) == []


# ---- really building them -------------------------------------------------------------------------
@pytest.mark.slow
def test_torch_style_cpp_package_builds_installs_and_imports(tmp_path, jl):
    """square_matrix_cpu.cpp and seed 004's hello (no #include at all) as one package: `jitlab export`, the pip
    command it prints (into a folder), import, call."""
    snippet = tmp_path / "cpp_ops"
    snippet.mkdir()
    for name in ("square_matrix_cpu.cpp", "hello_cpp.cpp"):
        shutil.copy(KERNELS / name, snippet)
    exported = jl("export", snippet, "--out", tmp_path / "pkg", cwd=tmp_path)
    assert exported.returncode == 0, exported.stderr
    printed = next(line for line in exported.stdout.splitlines() if "build and install:" in line).split(":", 1)[1].split()
    assert printed == ["pip", "install", "--no-build-isolation", str(tmp_path / "pkg")]
    r = subprocess.run([sys.executable, "-m", *printed, "--no-index", "--no-deps", "--target", str(tmp_path / "site")],
                       env=build_env(), capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    r = run_without_jitlab("""
        import torch, cpp_ops
        x = torch.randn(3, 5)
        torch.testing.assert_close(cpp_ops.square_matrix_cpu(x), x * x)
        print(cpp_ops.hello())
        try:
            cpp_ops.square_matrix_cpu(torch.ones(3))
        except RuntimeError as e:
            print("error:", str(e).splitlines()[0])
        print(sorted(cpp_ops.__all__))
    """, cwd=tmp_path, path=tmp_path / "site")
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.splitlines() == ["Hello World!", "error: matrix must be 2-D, got 1-D",
                                     "['hello', 'square_matrix_cpu']"]


OP_CPP = """
#include <ATen/core/Tensor.h>
#include <torch/library.h>
at::Tensor halve_cpu(const torch::Tensor& x) { return x / 2; }
TORCH_LIBRARY(pkgops, m) { m.def("halve(Tensor x) -> Tensor"); }
TORCH_LIBRARY_IMPL(pkgops, CPU, m) { m.impl("halve", &halve_cpu); }
"""


@pytest.mark.slow
def test_an_operator_package_registers_its_operators_on_import(tmp_path):
    """A TORCH_LIBRARY snippet exported and built with its setup.py: importing the package registers the
    operator, which is also the package's attribute (before, the extension had no module init and did
    not import)."""
    (tmp_path / "halve.cpp").write_text(OP_CPP)
    out = export(tmp_path / "halve.cpp", tmp_path / "pkg")
    assert "PyInit__C" in (out / "csrc" / "jitlab_module.cpp").read_text()
    r = subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace"], cwd=out, env=build_env(),
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    r = run_without_jitlab("""
        import torch, halve
        x = torch.arange(4.0)
        torch.testing.assert_close(torch.ops.pkgops.halve(x), x / 2)
        print(halve.halve is torch.ops.pkgops.halve, halve.__all__)
    """, cwd=out)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split() == ["True", "['halve']"]


def test_a_cuda_operator_package_gets_the_module_unit_that_loads_it(tmp_path):
    """A .cu that only registers operators (no .cpp, no pybind): the package still gets a C++ unit whose
    module init makes `import pkg` load the library, and __init__ names the operator."""
    (tmp_path / "scale_op.cu").write_text(textwrap.dedent("""\
        #include <torch/extension.h>
        __global__ void scale_kernel(float* y, const float* x, float a, int64_t n) {
            int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
            if (i < n) y[i] = a * x[i];
        }
        torch::Tensor scale_cuda(const torch::Tensor& x, double a) {
            auto y = torch::empty_like(x);
            scale_kernel<<<(x.numel() + 255) / 256, 256>>>(y.data_ptr<float>(), x.data_ptr<float>(), a, x.numel());
            return y;
        }
        TORCH_LIBRARY(cuops, m) { m.def("scale(Tensor x, float a) -> Tensor"); }
        TORCH_LIBRARY_IMPL(cuops, CUDA, m) { m.impl("scale", &scale_cuda); }
        """))
    out = export(tmp_path / "scale_op.cu", tmp_path / "pkg")
    assert {"csrc/jitlab_cuda.cu", "csrc/jitlab_module.cpp"} <= files_of(out)
    assert "PyInit__C" in (out / "csrc" / "jitlab_module.cpp").read_text()
    assert "jitlab_module.cpp" in (out / "setup.py").read_text()
    init = (out / "scale_op" / "__init__.py").read_text()
    assert "scale = torch.ops.cuops.scale\n" in init and "__all__ = ['scale']" in init


EXTRA_CPP = """
#include <stdexcept>
double total(const double* x, int n) { double s = 0; for (int i = 0; i < n; ++i) s += x[i]; return s; }
void check_positive(int n) { if (n < 0) throw std::invalid_argument("n must be >= 0"); }
int count_true(const bool* b, unsigned char n) { int c = 0; for (int i = 0; i < n; ++i) c += b[i]; return c; }
int first_byte(const void* p) { return *static_cast<const unsigned char*>(p); }
"""


@pytest.mark.slow
def test_kernel_only_cpp_package_builds_in_place_and_checks_arguments(tmp_path):
    """add2_cpu.cpp and a file of host functions (no torch) via `setup.py build_ext --inplace`: checked like jitlab's wrappers."""
    snippet = tmp_path / "cpu_kernels"
    snippet.mkdir()
    shutil.copy(KERNELS / "add2_cpu.cpp", snippet)
    (snippet / "extra.cpp").write_text(EXTRA_CPP)
    out = export(snippet, tmp_path / "pkg")
    b = subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace"], cwd=out, env=build_env(),
                       capture_output=True, text=True, timeout=900)
    assert b.returncode == 0, b.stdout[-3000:] + b.stderr[-3000:]
    r = run_without_jitlab("""
        import torch, cpu_kernels as k
        a, b, c = torch.arange(5.0), torch.full((5,), 0.5), torch.empty(5)
        k.add2_cpu(c, a, b, 5)
        print(c.tolist())
        k.add2_cpu(c=c, a=b, b=b, n=5)
        print(c.tolist())
        print(k.total(torch.arange(4, dtype=torch.float64), 4), k.count_true(torch.tensor([True, False, True]), 3))
        bad = [lambda: k.add2_cpu(c, a.double(), b, 5),
               lambda: k.add2_cpu(c, torch.zeros(10)[::2], b, 5),
               lambda: k.add2_cpu(torch.zeros(5, device="meta"), a, b, 5),
               lambda: k.add2_cpu(torch.zeros(5, requires_grad=True), a, b, 5),
               lambda: k.add2_cpu(c, a, b, 2.5),
               lambda: k.count_true(torch.ones(3, dtype=torch.bool), 300),
               lambda: k.check_positive(-1),
               lambda: k.first_byte(torch.tensor([1 + 2j]).conj()),
               lambda: k.add2_cpu(c, torch.tensor([1j] * 5).conj().imag, b, 5)]
        for f in bad:
            try:
                f()
            except (TypeError, ValueError, RuntimeError) as e:
                print(type(e).__name__, str(e).splitlines()[0])
        k.check_positive(1)
        with torch.no_grad():  # as torch's in-place ops: a leaf that requires grad may be written outside autograd
            k.add2_cpu(torch.zeros(5, requires_grad=True), a, b, 5)
        print(k.add2_cpu.__doc__.splitlines()[2])
    """, cwd=out)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = r.stdout.splitlines()
    assert lines[:3] == ["[0.5, 1.5, 2.5, 3.5, 4.5]", "[1.0, 1.0, 1.0, 1.0, 1.0]", "6.0 2"]
    assert lines[3] == ("TypeError add2_cpu(): argument 2 `a` (const float*) takes a float32 tensor, got float64; "
                        "convert with `.to(torch.float32)`")
    assert lines[4].startswith("ValueError add2_cpu(): argument 2 `a` (const float*) takes a contiguous tensor")
    assert lines[5].startswith("ValueError add2_cpu(): argument 1 `c` (float*) takes a CPU tensor")
    assert lines[6].startswith("ValueError add2_cpu(): argument 1 `c` (float*) is written (non-const pointer) but is a "
                               "leaf tensor that requires grad")
    assert lines[7].startswith("TypeError add2_cpu(): incompatible function arguments")  # pybind: no float for int64_t
    assert lines[8] == "ValueError count_true(): argument 2 `n` (unsigned char) must be in [0, 255], got 300; use a wider C type (int64_t) in the snippet"
    assert lines[9] == "RuntimeError check_positive() raised a C++ exception: n must be >= 0"
    assert lines[10] == ("ValueError first_byte(): argument 1 `p` (const void*) got a tensor whose conj bit is set "
                         "(`.is_conj()`): torch applies the conj lazily, so its memory holds the values before it, "
                         "which is what the code would read; pass `.resolve_conj()`")
    assert lines[11].startswith("ValueError add2_cpu(): argument 2 `a` (const float*) got a tensor whose neg bit is set")
    assert lines[12] == "add2_cpu(c: Tensor[float32, cpu, out], a: Tensor[float32, cpu, in], b: Tensor[float32, cpu, in], n: int)"


CUDA_LIBS_MISSING = ("cannot find -lc10_cuda", "cannot find -ltorch_cuda")


@pytest.mark.slow
@pytest.mark.skipif(toolchain.nvcc_path() is None, reason="needs nvcc")
@pytest.mark.parametrize("snippet", ["add2.cu", "square_matrix.cu"])
def test_cuda_package_compiles_with_its_own_setup_py(tmp_path, snippet):
    """Without a GPU: the package's setup.py compiles every unit with BuildExtension's own nvcc and c++ commands.

    A CPU build of torch has no CUDA home and no CUDA libraries, so the run points torch at nvcc's
    folder and an arch; with a CPU torch only the link against c10_cuda/torch_cuda can then fail.
    """
    out = export(KERNELS / snippet, tmp_path / "pkg")
    cuda_home = find_cuda_home()
    code = (f"import sys, runpy, torch.utils.cpp_extension as ce; ce.CUDA_HOME = ce.CUDA_HOME or {cuda_home!r}; "
            "sys.argv = ['setup.py', 'build_ext', '--inplace']; runpy.run_path('setup.py', run_name='__main__')")
    env = {**build_env(), "TORCH_CUDA_ARCH_LIST": os.environ.get("TORCH_CUDA_ARCH_LIST", "9.0")}
    r = subprocess.run([sys.executable, "-c", code], cwd=out, env=env, capture_output=True, text=True, timeout=900)
    log = r.stdout + r.stderr
    objects = sorted(p.name for p in (out / "build").rglob("*.o"))
    # A torch-style .cu file is split as jitlab.load splits it: nvcc compiles its kernels without torch's headers.
    units = {"add2.cu": ["jitlab_cuda.o"], "square_matrix.cu": ["jitlab_square_matrix.device.o", "jitlab_square_matrix.host.o"]}
    assert objects == sorted(units[snippet] + ["jitlab_module.o"]), log[-4000:]
    if torch.version.cuda is None:
        assert r.returncode != 0 and any(m in log for m in CUDA_LIBS_MISSING), log[-4000:]
        if snippet == "add2.cu":
            check_kernel_module_without_gpu(out, Path(cuda_home))
    else:
        assert r.returncode == 0, log[-4000:]


def find_cuda_home() -> str:
    """The CUDA toolkit of the nvcc jitlab uses: $CUDA_HOME, else the folder above nvcc that has the headers."""
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH")):
        if home:
            return home
    candidates = [Path(toolchain.nvcc_path()).resolve().parent.parent, Path(toolchain.DEFAULT_CUDA_HOME)]
    return str(next((c for c in candidates if (c / "include" / "cuda_runtime.h").is_file()), candidates[-1]))


def check_kernel_module_without_gpu(out: Path, cuda_home: Path) -> None:
    """A kernel-only module needs cudart, not torch's CUDA libraries: linked so, it imports here and checks devices."""
    lib = Path(torch.__file__).parent / "lib"
    cudart = cuda_home / "lib64"
    objects = sorted(str(p) for p in (out / "build").rglob("*.o"))
    so = out / "add2" / "_C.so"
    link = subprocess.run(["g++", "-shared", *objects, f"-L{lib}", f"-L{cudart}", "-lc10", "-ltorch", "-ltorch_cpu",
                           "-ltorch_python", "-lcudart", "-o", str(so)], capture_output=True, text=True)
    assert link.returncode == 0, link.stderr
    r = run_without_jitlab("""
        import torch, add2
        c, a = torch.empty(4), torch.ones(4)
        for f in (lambda: add2.add2_kernel(c, a, a, 4, grid=1, block=4), lambda: add2.launch_add2(c, a, a, 4)):
            try:
                f()
            except ValueError as e:
                print(str(e).splitlines()[0])
        print(add2.add2_kernel.__doc__.splitlines()[2])
    """, cwd=out, LD_LIBRARY_PATH=f"{cudart}{os.pathsep}{os.environ.get('LD_LIBRARY_PATH', '')}")
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.splitlines() == [
        "add2_kernel(): argument 1 `c` (float*) takes a CUDA tensor, got one on cpu; move it with `.cuda()`",
        "launch_add2(): argument 1 `c` (float*) takes a CUDA tensor, got one on cpu; move it with `.cuda()`",
        ("add2_kernel(c: Tensor[float32, cuda, out], a: Tensor[float32, cuda, in], b: Tensor[float32, cuda, in], "
         "n: int, *, grid, block, shared_mem=0, stream=None)"),
    ]


# ---- on a GPU ------------------------------------------------------------------------------------
@pytest.mark.gpu
def test_cuda_packages_build_install_and_match_torch(tmp_path):
    """square_matrix.cu (torch-style) and add2.cu (kernel-only) exported, pip-installed, imported without jitlab, checked."""
    site = tmp_path / "site"
    for snippet in ("square_matrix.cu", "add2.cu"):
        pip_install(export(KERNELS / snippet, tmp_path / snippet.replace(".", "_")), site)
    r = run_without_jitlab("""
        import sys, torch, square_matrix, add2
        say = lambda *words: print(">", *words, file=sys.stderr)  # stdout also gets square_matrix's printf
        x = torch.randn(129, 257, device="cuda")
        for f in (square_matrix.square_matrix, square_matrix.square_matrix1, square_matrix.square_matrix2):
            torch.testing.assert_close(f(x), x * x)
        n = 1_000_003
        a, b = torch.rand(n, device="cuda"), torch.rand(n, device="cuda")
        sms = torch.cuda.get_device_properties(0).multi_processor_count
        launches = {
            "add2_kernel": dict(grid=(n + 1023) // 1024, block=1024),
            "add2_kernel1": dict(grid=sms * 8, block=256),
            "add2_kernel2": dict(grid=sms * 4, block=256),
            "add2_kernel3": dict(grid=(n + 4095) // 4096, block=256),
        }
        for name, cfg in launches.items():
            c = torch.full_like(a, float("nan"))
            getattr(add2, name)(c, a, b, n, **cfg)
            torch.testing.assert_close(c, a + b)
        c = torch.full_like(a, float("nan"))
        add2.launch_add2(c, a, b, n)
        torch.testing.assert_close(c, a + b)
        s = torch.cuda.Stream()
        with torch.cuda.stream(s):  # a side stream as torch's current one, then passed as stream=
            c = torch.full_like(a, float("nan"))
            add2.add2_kernel1(c, a, b, n, grid=sms, block=256)
        s.synchronize()
        torch.testing.assert_close(c, a + b)
        c = torch.full_like(a, float("nan"))
        torch.cuda.synchronize()
        add2.add2_kernel3(c, a, b, n, grid=(n + 4095) // 4096, block=256, stream=s)
        s.synchronize()
        torch.testing.assert_close(c, a + b)
        for bad in (lambda: add2.add2_kernel(c, a.double(), b, n, grid=1, block=256),
                    lambda: add2.add2_kernel(c, a.cpu(), b, n, grid=1, block=256),
                    lambda: add2.add2_kernel(c, a, b, n),
                    lambda: add2.add2_kernel(c, a, b, n, grid=1, block=4096)):
            try:
                bad()
                say("no error")
            except (TypeError, ValueError, RuntimeError) as e:
                say(type(e).__name__, str(e).splitlines()[0])
        say("ok")
    """, cwd=tmp_path, path=site)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    lines = [line[2:] for line in r.stderr.splitlines() if line.startswith("> ")]
    assert lines[-1] == "ok"
    assert lines[-5].startswith("TypeError add2_kernel(): argument 2 `a` (const float*) takes a float32 tensor")
    assert lines[-4].startswith("ValueError add2_kernel(): argument 2 `a` (const float*) takes a CUDA tensor")
    assert lines[-3].startswith("ValueError add2_kernel() is a kernel: pass the launch configuration")
    assert lines[-2].startswith("RuntimeError add2_kernel<<<grid=(1, 1, 1), block=(4096, 1, 1), shared_mem=0>>> failed")


def test_two_split_files_of_one_name_get_units_of_their_own(write, tmp_path):
    """Two torch-style files named k.cu in two folders: each split into units of its own name, each unit's #line
    naming its own file under csrc/."""
    body = """
        #include <torch/extension.h>
        __global__ void {k}(float* y, int n) {{ int i = threadIdx.x; if (i < n) y[i] = 1.0f; }}
        torch::Tensor {f}(torch::Tensor y) {{ {k}<<<1, 256>>>(y.data_ptr<float>(), y.numel()); return y; }}
        """
    a = write("a/k.cu", body.format(k="ones_a", f="fill_a"))
    b = write("b/k.cu", body.format(k="ones_b", f="fill_b"))
    out = export([a, b], tmp_path / "pkg", name="twok")
    names = sorted(p.name for p in (out / "csrc").glob("jitlab_*"))
    assert names == ["jitlab_k.device.cu", "jitlab_k.host.cpp", "jitlab_k_2.device.cu", "jitlab_k_2.host.cpp",
                     "jitlab_module.cpp"]
    assert '#line 1 "a/k.cu"' in (out / "csrc" / "jitlab_k.host.cpp").read_text()
    assert '#line 1 "b/k.cu"' in (out / "csrc" / "jitlab_k_2.device.cu").read_text()
    assert "ones_b" in (out / "csrc" / "jitlab_k_2.device.cu").read_text()
