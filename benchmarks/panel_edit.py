"""Edit -> verdict in the playground panel: how long from a changed kernel to PASS/FAIL on screen.

Each round puts a new text in the panel's editor (a real edit: the build key changes, so nvcc runs)
and clicks Check, which saves the file, builds it and checks it against its ``NAME.ref.py`` in the
warm worker process; the clock stops when the panel's status line shows the verdict. The same
rounds run through the widget-free ``Session`` and with an in-process check, in the same run.

    python benchmarks/panel_edit.py [kernels/saxpy.cu] [--rounds 5]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _copy(kernel: Path, into: Path) -> Path:
    shutil.copy(kernel, into / kernel.name)
    shutil.copy(kernel.with_name(kernel.name.split(".")[0] + ".ref.py"), into)
    return into / kernel.name


def edited(text: str, k: int) -> str:
    """The kernel with a changed line: nvcc must run again, the result stays right."""
    return text + f"\n// edit {k} at {time.time_ns()}\n"


def panel_rounds(path: Path, rounds: int) -> list[float]:
    from jitlab.notebook.panel import Playground

    pg = Playground(path, watch=False)
    pg.run("check")  # first build and a warm worker, as after opening the panel
    pg.wait(300)
    base = pg.editor.value
    times = []
    for k in range(rounds):
        t0 = time.perf_counter()
        pg.editor.value = edited(base, k)
        pg.buttons["Check"].click()
        pg.wait(300)
        times.append(time.perf_counter() - t0)
        assert pg.status.value.startswith("PASS"), pg.status.value
        assert "built in" in pg.status.value, pg.status.value  # a real rebuild, not a cache hit
    pg.close()
    return times


def session_rounds(path: Path, rounds: int, isolate: bool) -> list[float]:
    from jitlab.notebook.session import Session

    s = Session(path, isolate=isolate)
    s.check()
    base = s.read()
    times = []
    for k in range(rounds):
        t0 = time.perf_counter()
        s.save(edited(base, 100 + k + (1000 if isolate else 0)))
        r = s.check()
        times.append(time.perf_counter() - t0)
        assert r.ok, r.status
    return times


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("kernel", nargs="?", default=str(ROOT / "kernels" / "saxpy.cu"))
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = _copy(Path(args.kernel), Path(tmp))
        rows = [("panel: edit, click Check (isolated)", panel_rounds(path, args.rounds)),
                ("Session: save + check (isolated)", session_rounds(path, args.rounds, True)),
                ("Session: save + check (in process)", session_rounds(path, args.rounds, False))]
    print(f"edit -> verdict for {Path(args.kernel).name}, {args.rounds} edits each (seconds)")
    for name, t in rows:
        print(f"  {name:38} median {statistics.median(t):.2f}  min {min(t):.2f}  max {max(t):.2f}")


if __name__ == "__main__":
    main()
