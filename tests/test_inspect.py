"""jitlab.tools.inspect without a GPU: occupancy from the limits table, PTX and SASS from the real nvcc, the CLI."""

from __future__ import annotations

from pathlib import Path

import pytest

import jitlab
from jitlab import cli
from jitlab.jit import toolchain
from jitlab.tools import inspect, listing

ROOT = Path(__file__).resolve().parent.parent
KERNELS = ROOT / "kernels"

needs_nvcc = pytest.mark.skipif(toolchain.nvcc_path() is None, reason="needs nvcc")
needs_cuobjdump = pytest.mark.skipif(
    toolchain.nvcc_path() is None or not toolchain.find_cuda_tool("cuobjdump") or not toolchain.find_cuda_tool("nvdisasm"),
    reason="needs nvcc, cuobjdump and nvdisasm (pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm)")


def _r(registers: int, shared: int = 0) -> dict:
    return {"registers": registers, "shared": shared, "local": 0, "constant": 0}


def test_occupancy_full_at_32_registers_sm90():
    """sm_90, 256 threads, 32 registers: 8 blocks (64 warps) per SM, 100%."""
    occ = inspect.occupancy(_r(32), 256, arch="sm_90")
    assert occ["blocks_per_sm"] == 8 and occ["warps_per_sm"] == 64 and occ["occupancy"] == 1.0
    assert occ["limiter"] == "threads/warps"


def test_occupancy_64_registers_is_register_limited():
    """64 registers x 256 threads: 64 K registers per SM hold 4 blocks (32 warps), 50%, limited by registers."""
    occ = inspect.occupancy(_r(64), 256, arch="sm_90")
    assert occ["blocks_per_sm"] == 4 and occ["warps_per_sm"] == 32 and occ["occupancy"] == 0.5
    assert occ["limiter"] == "registers"


def test_occupancy_register_allocation_granularity():
    """Registers are allocated 256 per warp: 33 registers cost as much as 40 (1280/warp): 12 warps per
    sub-partition, 48 per SM, so 6 blocks of 8 warps (48/64 = 75%)."""
    occ = inspect.occupancy(_r(33), 256, arch="sm_90")
    assert occ["blocks_per_sm"] == 6 and occ["occupancy"] == 0.75 and occ["limiter"] == "registers"


def test_occupancy_48k_static_shared_sm80_is_shared_memory_limited():
    """sm_80, 48 KB static shared (+1 KB reserved) per block: 164 KB per SM holds 3 blocks, 24/64 warps."""
    occ = inspect.occupancy(_r(32, shared=48 * 1024), 256, arch="sm_80")
    assert occ["blocks_per_sm"] == 3 and occ["warps_per_sm"] == 24 and occ["occupancy"] == 0.375
    assert occ["limiter"] == "shared memory"


def test_occupancy_dynamic_shared_and_block_limits():
    """Dynamic shared memory counts; tiny blocks hit the blocks-per-SM cap; too much shared means 0 blocks."""
    occ = inspect.occupancy(_r(16), 256, dynamic_smem=100 * 1024, arch="sm_90")
    assert occ["blocks_per_sm"] == 2 and occ["limiter"] == "shared memory"
    occ = inspect.occupancy(_r(16), 32, arch="sm_90")
    assert occ["blocks_per_sm"] == 32 and occ["warps_per_sm"] == 32 and occ["limiter"] == "blocks"
    occ = inspect.occupancy(_r(16), 32, arch="sm_86")  # sm_86: 16 blocks, 48 warps per SM
    assert occ["blocks_per_sm"] == 16 and occ["occupancy"] == pytest.approx(16 / 48)
    big_static = {**_r(16), "shared": 100 * 1024}  # static + dynamic past the per-block maximum: no block fits
    assert inspect.occupancy(big_static, 256, dynamic_smem=200 * 1024, arch="sm_90")["blocks_per_sm"] == 0


@pytest.mark.parametrize("block, smem, said", [(4096, 0, "1 to 1024 threads"), (0, 0, "1 to 1024 threads"),
                                               (256, -1, "0 to 232448 bytes"), (256, 300 * 1024, "0 to 232448 bytes")])
def test_occupancy_refuses_a_launch_cuda_cannot_make(block, smem, said):
    """A block past 1024 threads or a shared-memory size below 0 or past the arch's maximum is refused."""
    with pytest.raises(jitlab.ArgumentError, match=said):
        inspect.occupancy(_r(16), block, dynamic_smem=smem, arch="sm_90")


def test_occupancy_arch_spellings_and_unknown_arch():
    """sm_90a uses sm_90's limits; an arch without a table row is an ArgumentError naming the known ones."""
    assert inspect.occupancy(_r(64), 256, arch="sm_90a")["blocks_per_sm"] == 4
    with pytest.raises(jitlab.ArgumentError, match="sm_75"):
        inspect.occupancy(_r(32), 256, arch="sm_61")


@needs_nvcc
def test_ptx_of_saxpy_has_the_entry_and_the_source_lines(cache):
    """ptx() of saxpy.cu has its .entry and the kernel's source line as a comment next to its .loc."""
    text = inspect.ptx(KERNELS / "saxpy.cu", arch="sm_90")
    assert ".entry _Z5saxpyPfPKffi" in text and ".target sm_90" in text
    lines = text.splitlines()
    comment = next(i for i, line in enumerate(lines) if line.strip().startswith("//") and "y[i] = a * x[i] + y[i];" in line)
    assert "saxpy.cu:11:" in lines[comment] and lines[comment + 1].strip().startswith(".loc")
    one = inspect.ptx(KERNELS / "saxpy.cu", kernel="saxpy", arch="sm_90")
    assert one.count(".entry") == 1 and one.rstrip().endswith("}") and ".version" in one


@needs_nvcc
def test_ptx_picks_one_kernel_and_names_the_others(cache, write):
    """kernel= keeps only that .entry; an unknown name is an ArgumentError listing the kernels."""
    p = write("two.cu", """
        __global__ void first(float* y) { y[threadIdx.x] = 1.0f; }
        __global__ void second(float* y) { y[threadIdx.x] = 2.0f; }
    """)
    text = inspect.ptx(p, kernel="second", arch="sm_80")
    assert "second" in text and "first" not in text and "2.0f" in text
    with pytest.raises(jitlab.ArgumentError, match="first, second"):
        inspect.ptx(p, kernel="third", arch="sm_80")


needs_nvdisasm = pytest.mark.skipif(
    toolchain.nvcc_path() is None or not toolchain.find_cuda_tool("nvdisasm"),
    reason="needs nvcc and nvdisasm (pip install nvidia-cuda-nvdisasm)")


def _before(lines: list[str], needle: str, instruction: str) -> bool:
    """The source comment holding ``needle`` comes before ``instruction``, with only instructions between."""
    i = next(i for i, line in enumerate(lines) if line.strip().startswith("//") and needle in line)
    for line in lines[i + 1:]:
        if instruction in line:
            return True
        if line.strip().startswith("//"):
            return False
    return False


@needs_nvdisasm
def test_sass_of_saxpy_sm90_interleaves_the_source_lines(cache):
    """sass() of saxpy (an NVRTC build): `// saxpy.cu:11: y[i] = ...` before the FFMA, no encodings, ends at EXIT."""
    text = inspect.sass(KERNELS / "saxpy.cu", kernel="saxpy", arch="sm_90")
    lines = text.splitlines()
    assert lines[0].strip() == "Function : _Z5saxpyPfPKffi (saxpy)"
    assert _before(lines, "saxpy.cu:11: y[i] = a * x[i] + y[i];", "FFMA")
    assert _before(lines, "saxpy.cu:9: int i = blockIdx.x * blockDim.x + threadIdx.x;", "S2R")
    assert "/* 0x" not in text and "NOP" not in text and "BRA" not in text
    assert lines[-1].strip().endswith("EXIT ;")


@pytest.mark.slow
@needs_cuobjdump
def test_sass_of_an_nvcc_build_reads_the_cubin_in_the_object(cache):
    """engine='nvcc': the CUBIN comes out of the object (cuobjdump -xelf) and is interleaved the same way."""
    text = inspect.sass(KERNELS / "saxpy.cu", kernel="saxpy", arch="sm_90", engine="nvcc")
    assert _before(text.splitlines(), "saxpy.cu:11: y[i] = a * x[i] + y[i];", "FFMA")
    assert "/* 0x" not in text and "NOP" not in text


@needs_nvdisasm
def test_sass_names_the_call_site_of_an_inlined_function(cache, write):
    """The body of an inlined __device__ function shows its own line and `(inlined at k.cu:LINE)`."""
    p = write("k.cu", """
        __device__ float square_plus_one(float v) {
            return v * v + 1.0f;
        }

        __global__ void k(float* y, const float* x, int n) {
            int i = blockIdx.x * blockDim.x + threadIdx.x;
            if (i < n) y[i] = square_plus_one(x[i]);
        }
    """)
    text = inspect.sass(p, arch="sm_90")
    assert "k.cu:2: return v * v + 1.0f;  (inlined at k.cu:7)" in text


@needs_cuobjdump
def test_sass_raw_is_cuobjdumps_listing(cache):
    """raw=True: cuobjdump -sass as it is (encodings, padding); sass_diff finds no change against the interleaved one."""
    raw = inspect.sass(KERNELS / "saxpy.cu", kernel="saxpy", arch="sm_90", raw=True)
    assert "Function : _Z5saxpyPfPKffi" in raw and "/* 0x" in raw and "NOP" in raw
    assert listing.sass_diff(raw, inspect.sass(KERNELS / "saxpy.cu", kernel="saxpy", arch="sm_90")) == ""


@needs_nvdisasm
def test_sass_diff_shows_the_changed_instruction(cache, write):
    """Two versions of a kernel (add vs multiply): the diff has the new instruction, no addresses, encodings or source."""
    k1 = write("v1/k.cu", "__global__ void k(float* y, float a) { y[threadIdx.x] = y[threadIdx.x] + a; }\n")
    k2 = write("v2/k.cu", "__global__ void k(float* y, float a) { y[threadIdx.x] = y[threadIdx.x] * a; }\n")
    old, new = inspect.sass(k1, arch="sm_90"), inspect.sass(k2, arch="sm_90")
    diff = listing.sass_diff(old, new)
    changed = [line for line in diff.splitlines() if line[:1] in "+-" and not line.startswith(("+++", "---"))]
    assert any(line.startswith("-") and "FADD" in line for line in changed)
    assert any(line.startswith("+") and "FMUL" in line for line in changed)
    assert not any("/*" in line or "//" in line for line in changed)
    assert listing.sass_diff(old, old) == ""


@needs_nvdisasm
def test_sass_diff_ignores_moved_source_lines(cache, write):
    """A comment added above the kernel moves every line number; the instructions, so the diff, stay the same."""
    body = "__global__ void k(float* y, float a) {\n    y[threadIdx.x] = y[threadIdx.x] + a;\n}\n"
    k1 = write("v1/k.cu", body)
    k2 = write("v2/k.cu", "// the same kernel, two lines lower\n\n" + body)
    old, new = inspect.sass(k1, arch="sm_90"), inspect.sass(k2, arch="sm_90")
    assert "k.cu:2:" in old and "k.cu:4:" in new
    assert listing.sass_diff(old, new) == ""


# An nvdisasm -c -gi listing, cut down: line info with an inlining chain, a loop label, the padding.
NVDISASM = """\
\t.target\tsm_90

//--------------------- .text._Z1kPfPKfi          --------------------------
\t.section\t.text._Z1kPfPKfi,"ax",@progbits
_Z1kPfPKfi:
.text._Z1kPfPKfi:
\t//## File "/src/k.cu", line 5
        /*0000*/                   LDC R1, c[0x0][0x28] ;
.L_x_1:
\t//## File "/src/k.cu", line 2 inlined at "/src/k.cu", line 7
\t//## File "/src/k.cu", line 7
        /*0010*/                   FFMA R7, R2, R2, 1 ;
        /*0020*/               @P0 BRA `(.L_x_1) ;
.L_x_2:
\t//## File "/src/k.cu", line 8
        /*0030*/                   EXIT ;
.L_x_0:
        /*0040*/                   BRA `(.L_x_0);
        /*0050*/                   NOP;
        /*0060*/                   NOP;
.L_x_3:


//--------------------- SYMBOLS --------------------------
"""


def test_render_sass_from_an_nvdisasm_listing():
    """Source lines from the line table, inlining as `(inlined at ...)`, used labels kept, padding after EXIT gone."""
    sources = {"/src/k.cu": ["__device__ float sq(float v) {", "    return v * v + 1.0f;", "}", "",
                             "__global__ void k(float* y) {", "", "    y[0] = sq(y[0]);", "}"]}
    functions = listing.parse_nvdisasm(NVDISASM)
    assert [f.name for f in functions] == ["_Z1kPfPKfi"]
    lines = [line.strip() for line in listing.render_sass(functions, sources).splitlines() if line.strip()]
    assert lines == [
        "Function : _Z1kPfPKfi (k)",
        "// k.cu:5: __global__ void k(float* y) {",
        "/*0000*/        LDC R1, c[0x0][0x28] ;",
        ".L_x_1:",
        "// k.cu:2: return v * v + 1.0f;  (inlined at k.cu:7)",
        "/*0010*/        FFMA R7, R2, R2, 1 ;",
        "/*0020*/    @P0 BRA `(.L_x_1) ;",
        "// k.cu:8: }",
        "/*0030*/        EXIT ;",
    ]


# cuobjdump -sass's layout: encodings on the instruction's line and the next, a branch to itself, NOPs.
CUOBJDUMP = """\
\t\tFunction : _Z1kPfPKfi
\t.headerflags\t@"EF_CUDA_SM90 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"
        /*0000*/                   LDG.E.128 R4, desc[UR4][R2.64] ;     /* 0x0000000402047981 */
                                                                       /* 0x000ea2000c1e1d00 */
        /*0010*/                   LDG.E.EF.128 R8, desc[UR4][R2.64] ;  /* 0x0000000402087981 */
                                                                       /* 0x000ea2000c1e1d00 */
        /*0020*/               @P0 LDG.E.128.CONSTANT R12, desc[UR4][R2.64] ;  /* 0x0000000402087981 */
        /*0030*/                   LDG.E.64 R16, desc[UR4][R2.64] ;     /* 0x0000000402107981 */
        /*0040*/                   STG.E.128 desc[UR4][R2.64], R4 ;     /* 0x0000000402007986 */
        /*0050*/                   EXIT ;                              /* 0x000000000000794d */
        /*0060*/                   BRA 0x60;                           /* 0xfffffffc00fc7947 */
        /*0070*/                   NOP;                                /* 0x0000000000007918 */
"""


def test_count_instructions_matches_modifiers_in_any_order():
    """count_instructions(s, "LDG.E.128") counts LDG.E.EF.128 and LDG.E.128.CONSTANT too; not LDG.E.64 or STG."""
    assert listing.count_instructions(CUOBJDUMP, "LDG.E.128") == 3
    assert listing.count_instructions(CUOBJDUMP, "LDG.128") == 3
    assert listing.count_instructions(CUOBJDUMP, "ldg") == 4
    assert listing.count_instructions(CUOBJDUMP, "LDG.EF.128") == 1
    assert listing.count_instructions(CUOBJDUMP, "NOP") == 0  # the padding is not code
    assert listing.instructions(CUOBJDUMP)[2] == "@P0 LDG.E.128.CONSTANT R12, desc[UR4][R2.64] ;"
    assert listing.instructions(CUOBJDUMP)[-1] == "EXIT ;"


def test_missing_nvdisasm_names_the_pip_package(monkeypatch):
    """Without nvdisasm, sass() is a ToolchainError naming `pip install nvidia-cuda-nvdisasm`."""
    monkeypatch.setattr(toolchain, "find_cuda_tool", lambda name: None)
    with pytest.raises(jitlab.ToolchainError, match="pip install nvidia-cuda-nvdisasm"):
        inspect.sass(KERNELS / "saxpy.cu")


@needs_nvdisasm
def test_missing_cuobjdump_for_an_nvcc_build_names_the_pip_package(cache, monkeypatch):
    """An nvcc build's CUBIN is inside an object: without cuobjdump, the error names `pip install nvidia-cuda-cuobjdump`."""
    find = toolchain.find_cuda_tool
    monkeypatch.setattr(toolchain, "find_cuda_tool", lambda name: None if name == "cuobjdump" else find(name))
    with pytest.raises(jitlab.ToolchainError, match="pip install nvidia-cuda-cuobjdump"):
        inspect.sass(KERNELS / "saxpy.cu", arch="sm_90", engine="nvcc")


@needs_nvcc
def test_resources_reuses_the_compile_only_build(cache):
    """resources() is the compile-only build's per-kernel, per-arch table."""
    r = inspect.resources(KERNELS / "saxpy.cu", arch=["sm_75", "sm_90"])
    assert set(r["saxpy"]) == {"sm_75", "sm_90"} and r["saxpy"]["sm_90"]["registers"] > 0


@needs_nvcc
def test_cli_inspect_prints_occupancy_and_limiter(cache, capsys):
    """`jitlab inspect kernels/saxpy.cu --block 256` prints registers, occupancy and its limiter."""
    assert cli.main(["inspect", str(KERNELS / "saxpy.cu"), "--arch", "sm_90", "--block", "256"]) == 0
    out = capsys.readouterr().out
    assert "saxpy [sm_90]:" in out and "registers" in out
    assert "8 blocks/SM" in out and "occupancy 100%" in out and "limited by threads/warps" in out


@needs_nvcc
def test_cli_inspect_ptx_and_unknown_kernel(cache, capsys):
    """--ptx prints the annotated PTX; --kernel with an unknown name fails naming the kernels."""
    assert cli.main(["inspect", str(KERNELS / "saxpy.cu"), "--kernel", "saxpy", "--ptx"]) == 0
    out = capsys.readouterr().out
    assert ".entry _Z5saxpyPfPKffi" in out and "y[i] = a * x[i] + y[i];" in out
    assert cli.main(["inspect", str(KERNELS / "saxpy.cu"), "--kernel", "nope"]) == 1
    assert "saxpy" in capsys.readouterr().err


@needs_nvdisasm
def test_cli_inspect_sass_interleaves_and_raw_does_not(cache, capsys):
    """`jitlab inspect --sass` prints source lines between the instructions; `--raw` cuobjdump's listing."""
    assert cli.main(["inspect", str(KERNELS / "saxpy.cu"), "--arch", "sm_90", "--sass"]) == 0
    out = capsys.readouterr().out
    assert "// SASS [sm_90]" in out and "// saxpy.cu:11: y[i] = a * x[i] + y[i];" in out and "/* 0x" not in out
    if toolchain.find_cuda_tool("cuobjdump"):
        assert cli.main(["inspect", str(KERNELS / "saxpy.cu"), "--arch", "sm_90", "--raw"]) == 0
        out = capsys.readouterr().out
        assert "(cuobjdump -sass)" in out and "/* 0x" in out and "saxpy.cu:11" not in out


def test_cuobjdump_is_found_in_the_pip_wheel(monkeypatch):
    """With nothing on PATH and no CUDA_HOME, the binary of the nvidia-cuda-cuobjdump wheel is found."""
    nvidia = pytest.importorskip("nvidia")
    wheel = [p for root in nvidia.__path__ for p in Path(root).glob("*/bin/cuobjdump")]
    if not wheel:
        pytest.skip("nvidia-cuda-cuobjdump is not installed")
    monkeypatch.setenv("PATH", "")
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    found = toolchain.find_cuda_tool("cuobjdump")
    assert found and Path(found).name == "cuobjdump" and Path(found).is_file()
