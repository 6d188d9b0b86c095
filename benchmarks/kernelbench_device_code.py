"""KernelBench solutions' device code through jitlab's split, on a CPU: what the split loses that torch's build keeps.

jitlab builds a torch-style ``load_inline`` call as two units: the kernels without torch's headers (the
device unit, compiled by NVRTC, or by nvcc where NVRTC refuses) and the host code on precompiled torch
headers. torch compiles the whole ``.cu`` with its headers. Code that leans on what those headers bring
(``FLT_MAX``, ``using namespace at;``) builds under torch and may not in a device unit. This scan finds
such code across a corpus without a GPU, in minutes:

1. each solution runs with a ``load_inline`` that records its calls and builds nothing (the file's classes are
   defined, nothing is called);
2. each call's sources are written as ``jitlab.load_inline`` writes them and split as jitlab splits them;
3. the device unit is compiled by NVRTC for ``--arch`` with the call's CUDA flags, as jitlab's default engine
   does; where NVRTC refuses it, by ``nvcc -c`` (jitlab's fallback);
4. where nvcc refuses it too, the whole file is compiled by ``nvcc -c`` with torch's headers, as torch's
   ``load_inline`` would: if that passes, the failure is jitlab's alone.

Host units are not compiled (that needs torch's headers for every call: ``kernelbench_corpus.py`` builds
them on the GPU machine). A line per call that is not NVRTC's at once, then the counts::

    PYTHONPATH=. python benchmarks/kernelbench_device_code.py corpora/kernelbench [--arch sm_90] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from jitlab.jit import cudacore, flags, shellwords, toolchain, torch_compat  # noqa: E402
from jitlab.jit.engines import nvrtc, nvrtc_torch  # noqa: E402
from jitlab.jit.parse import parse_file  # noqa: E402
from jitlab.jit.split import split  # noqa: E402
from jitlab.judge import kernelbench, kernelbench_pairs  # noqa: E402

CATEGORIES = ("nvrtc", "nvcc fallback", "whole file", "own error", "jitlab only", "not run")


def calls_of(solution: Path) -> tuple[list[dict], str]:
    """The ``load_inline`` calls running ``solution`` makes (keywords, positional ones named), and its error if
    it stopped (a solution that needs its extension at import stops at its first use of it)."""
    calls: list[dict] = []

    def record(*args, **kwargs):
        calls.append({**dict(zip(("name", "cpp_sources", "cuda_sources", "functions"), args)), **kwargs})
        return _Unbuilt()

    error = ""
    with kernelbench.swapped(record):
        try:
            kernelbench.import_file(solution, "kernelbench_scanned")
        except Exception as e:  # the solution's own, or a use of an unbuilt module at import: not this scan's
            error = f"{type(e).__name__}: {e}".splitlines()[0][:200]
    return calls, error


class _Unbuilt:
    """What a recorded call returns: any function of it may be named (``fn = ext.fn`` at import), none runs."""

    def __getattr__(self, name: str):
        def unbuilt(*args, **kwargs):
            raise RuntimeError(f"{name}: not built (the scan builds nothing)")
        return unbuilt


def _first_error(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return next((ln for ln in lines if "error" in ln), lines[0] if lines else "")[:240]


def scan(call: dict, arch: str, work: Path) -> tuple[str, str]:
    """One call's category (:data:`CATEGORIES`) and the first error behind it."""
    if not call.get("cuda_sources"):
        return "not run", "no cuda_sources"
    cuda_flags = shellwords.flag_list(call.get("extra_cuda_cflags"), "extra_cuda_cflags")
    snip = torch_compat.materialize(call["name"], call.get("cpp_sources") or [], call["cuda_sources"],
                                    call.get("functions"), folder=work / call["name"])
    cu = next(f for f in snip.files if f.suffix == ".cu")
    units = split(parse_file(cu))
    if units.reason:
        return "whole file", units.reason  # built as torch builds it
    fields, refused = nvrtc_torch.nvrtc_flags(cuda_flags)
    fields = {k: v for k, v in fields.items() if v != []}  # cuda.core refuses an empty macro list
    if not refused:
        core = cudacore.module()
        includes = [str(nvrtc.SHIMS), str(cu.parent), *fields.pop("include_path", []), *_cuda_includes()]
        try:
            core.Program(nvrtc_torch.device_source(units.device, []), "c++",
                         core.ProgramOptions(arch=arch, include_path=includes, **{"std": "c++17", **fields})).compile("cubin")
            return "nvrtc", ""
        except Exception as e:  # cuda.core raises its own error types, with NVRTC's log
            nvrtc_error = _first_error(str(e))
    else:
        nvrtc_error = f"flags NVRTC does not take: {' '.join(refused)}"
    device = cu.with_name("device_unit.cu")
    device.write_text(units.device)
    device_error = _nvcc(device, arch, cuda_flags)
    if device_error is None:
        return "nvcc fallback", nvrtc_error
    whole_error = _nvcc(cu, arch, cuda_flags, torch_headers=True)
    return ("own error", whole_error) if whole_error is not None else ("jitlab only", device_error)


def _cuda_includes() -> list[str]:
    cuda = toolchain.cuda_home() / "include"
    return [str(cuda), *([str(cuda / "cccl")] if (cuda / "cccl").is_dir() else [])]


def _nvcc(path: Path, arch: str, cuda_flags: list[str], torch_headers: bool = False) -> str | None:
    """``nvcc -c`` of ``path`` (with torch's headers and nvcc flags, as its ``load_inline``: ``torch_headers``):
    ``None`` if it compiles, else its first error line."""
    from torch.utils import cpp_extension

    torch = [*flags.torch_include_flags(cuda=True), "-DTORCH_EXTENSION_NAME=scanned"] if torch_headers else []
    p = subprocess.run([str(toolchain.nvcc_path()), "-c", f"-arch={arch}", "-std=c++17", *cpp_extension.COMMON_NVCC_FLAGS,
                        *torch, *cuda_flags, str(path), "-o", str(path.with_suffix(".o"))], capture_output=True, text=True)
    return None if p.returncode == 0 else _first_error(p.stderr + p.stdout)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("pairs", help="a folder of pair folders, or one pair folder (problem.py + solution*.py)")
    ap.add_argument("--arch", default="sm_90", help="the arch to compile for (default sm_90)")
    ap.add_argument("--json", help="write each call's category and error here")
    args = ap.parse_args()
    rows = {}
    with tempfile.TemporaryDirectory(prefix="kb-device-") as tmp:
        for i, pair in enumerate(kernelbench_pairs.pairs([args.pairs])):
            calls, error = calls_of(pair.solution)
            if not calls:
                rows[pair.name] = ("not run", error or "no load_inline call")
            for k, call in enumerate(calls):
                key = pair.name if len(calls) == 1 else f"{pair.name}#{k}"
                rows[key] = scan(call, args.arch, Path(tmp) / str(i) / str(k))
                if rows[key][0] != "nvrtc":
                    print(f"{key:<44} {rows[key][0]:<14} {rows[key][1]}", flush=True)
    counts = Counter(category for category, _ in rows.values())
    print(f"\n{len(rows)} calls: " + ", ".join(f"{counts[c]} {c}" for c in CATEGORIES if counts[c]))
    if args.json:
        Path(args.json).write_text(json.dumps({k: {"category": c, "error": e} for k, (c, e) in rows.items()}, indent=1))
    return 1 if counts["jitlab only"] else 0


if __name__ == "__main__":
    sys.exit(main())
