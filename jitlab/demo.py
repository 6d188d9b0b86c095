"""The demo: every kernel in ``kernels/`` built and checked against its torch reference.

A kernel ``kernels/NAME.cu`` (or ``NAME.cpp``, or a folder ``NAME/``) has its reference beside it in
``kernels/NAME.ref.py``, which defines ``SIZES``, ``inputs(size, seed, device)``,
``reference(inputs)`` and ``run(module, inputs)``. With a GPU every kernel runs; without one the
C++ kernels run on CPU and the CUDA kernels are compile-checked for the named archs.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from . import config, toolchain
from .errors import JitlabError

DEFAULT_ARCHS = ("sm_75", "sm_80", "sm_90")


@dataclass
class Kernel:
    """A kernel snippet and its reference file."""

    name: str
    path: Path
    ref: Path

    @property
    def is_cuda(self) -> bool:
        files = [self.path] if self.path.is_file() else list(self.path.iterdir())
        return any(f.suffix in config.CUDA_EXTS for f in files)


def find_kernels(root: str | Path = "kernels") -> list[Kernel]:
    """Every snippet under ``root`` that has a ``.ref.py`` beside it, sorted by name."""
    root = Path(root)
    found = []
    for ref in sorted(root.glob("*.ref.py")):
        name = ref.name[: -len(".ref.py")]
        cands = [root / name] + [root / f"{name}{ext}" for ext in config.SOURCE_EXTS]
        path = next((c for c in cands if c.exists()), None)
        if path is not None:
            found.append(Kernel(name, path, ref))
    return found


def load_reference(ref: Path):
    """Import a ``.ref.py`` file as a module."""
    spec = importlib.util.spec_from_file_location(f"jitlab_ref_{ref.stem.replace('.', '_')}", ref)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def compare(got, expected) -> str:
    """``""`` if ``got`` matches ``expected`` (tensors: ``torch.testing.assert_close``), else why not."""
    import torch

    if isinstance(expected, str):
        return "" if got == expected else f"printed {got!r}, expected {expected!r}"
    try:
        torch.testing.assert_close(got, expected)
    except AssertionError as e:
        return str(e).splitlines()[0] + " " + " ".join(str(e).splitlines()[1:3])
    return ""


def run_kernel(k: Kernel, device: str, max_size: int | None = None) -> dict:
    """Build one kernel, run it on each size of its reference, and compare."""
    import jitlab

    row = {"kernel": k.name, "path": str(k.path)}
    t0 = time.perf_counter()
    try:
        mod = jitlab.load(k.path)
    except JitlabError as e:
        return {**row, "status": "FAIL", "detail": str(e).splitlines()[0]}
    row.update(kind=mod.build.plan.kind, build=("cached" if mod.build.cached else f"{time.perf_counter() - t0:.1f} s"))
    ref = load_reference(k.ref)
    sizes = [s for s in ref.SIZES if max_size is None or s <= max_size] or ref.SIZES[:1]
    for size in sizes:
        inp = ref.inputs(size, 0, device)
        try:
            with contextlib.redirect_stdout(io.StringIO()):  # kernels that printf stay out of the table
                got = ref.run(mod, inp)
            why = compare(got, ref.reference(inp))
        except Exception as e:  # the demo reports every kernel, whatever one of them does
            why = f"{type(e).__name__}: {e}"
        if why:
            return {**row, "status": "FAIL", "detail": f"size {size}: {why}"}
    return {**row, "status": "ok", "detail": f"matches torch at sizes {', '.join(map(str, sizes))}"}


def compile_kernel(k: Kernel, archs: tuple[str, ...]) -> dict:
    """Compile-check one CUDA kernel for ``archs`` and summarize its resource usage."""
    import jitlab

    row = {"kernel": k.name, "path": str(k.path)}
    t0 = time.perf_counter()
    try:
        b = jitlab.build(k.path, compile_only=True, arch=list(archs))
    except JitlabError as e:
        return {**row, "status": "FAIL", "detail": str(e).splitlines()[0]}
    regs = ", ".join(
        f"{kern}: {max(a['registers'] for a in per.values())} regs" for kern, per in sorted(b.resources.items())
    )
    return {**row, "kind": b.plan.kind, "build": "cached" if b.cached else f"{time.perf_counter() - t0:.1f} s",
            "status": "compiled", "detail": regs or "compiled"}


def main(root: str = "kernels", archs: tuple[str, ...] = DEFAULT_ARCHS, max_size: int | None = None) -> int:
    """Run the demo and print a table; returns the number of failures."""
    kernels = find_kernels(root)
    if not kernels:
        print(f"no kernels with a .ref.py found under {root}/")
        return 1
    gpu = toolchain.gpu_available()
    if gpu:
        import torch

        print(f"GPU: {torch.cuda.get_device_name()} ({toolchain.current_arch()}), torch {torch.__version__}")
        rows = [run_kernel(k, "cuda" if k.is_cuda else "cpu", max_size) for k in kernels]
    else:
        print(f"no CUDA GPU found: running the C++ kernels on CPU and compile-checking the CUDA kernels "
              f"for {', '.join(archs)} (nothing CUDA runs here)")
        cpu_rows = [run_kernel(k, "cpu", max_size) for k in kernels if not k.is_cuda]
        with ThreadPoolExecutor(max_workers=2) as pool:
            cuda_rows = list(pool.map(lambda k: compile_kernel(k, archs), [k for k in kernels if k.is_cuda]))
        rows = cpu_rows + cuda_rows
    print_table(rows)
    failed = sum(r["status"] == "FAIL" for r in rows)
    print(f"\n{len(rows) - failed} passed, {failed} failed")
    return failed


def print_table(rows: list[dict]) -> None:
    cols = ["kernel", "kind", "build", "status", "detail"]
    widths = {c: max(len(c), *(len(str(r.get(c, ""))) for r in rows)) for c in cols[:-1]}
    print("  ".join(c.ljust(widths.get(c, 0)) for c in cols))
    for r in rows:
        print("  ".join(str(r.get(c, "")).ljust(widths.get(c, 0)) for c in cols))
