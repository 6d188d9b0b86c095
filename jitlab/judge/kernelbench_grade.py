"""Grading one KernelBench solution as KernelBench does, and the part of it that is the problem's alone.

Grading follows KernelBench's ``eval_kernel_against_ref``: both models are made from
``get_init_inputs()`` under the same seed (so their weights agree), the solution must agree with
``Model`` on :data:`~jitlab.judge.kernelbench.TRIALS` inputs from ``get_inputs()``, each under a seed drawn
from ``torch.manual_seed(seed)`` as KernelBench draws them, within ``atol = rtol = 1e-2``; a right one is
then timed against ``Model`` in eager mode and under ``torch.compile``. Mismatches come from
:func:`jitlab.judge.checker.check`, with its reasons (how many wrong, the first indices, got/expected,
outputs never written).

Half of that is the problem's alone: each trial's inputs (drawn on the CPU, as KernelBench draws them:
most of a check's time), ``Model``'s outputs on them, the timed input and ``Model``'s times.
:func:`reference` does that half once and saves it, so that a batch makes it while its solutions still
build, as KernelBench times each problem's ``Model`` once; :func:`grade` with ``reference=`` then does the
solution's half alone, on the same inputs (the same seeds give the same tensors) and against the same outputs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch

from jitlab.errors import ArgumentError
from jitlab.judge import checker, timing
from jitlab.judge.kernelbench import SEED, TOLERANCE, TRIALS, Builds, import_file, import_solution


def set_seed(seed: int) -> None:
    """KernelBench's ``set_seed``: the CPU generator and the current GPU's."""
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed(seed)


def trial_seeds(seed: int = SEED, trials: int = TRIALS) -> list[int]:
    """The seed of each correctness trial, drawn as KernelBench draws them."""
    torch.manual_seed(seed)
    return [int(torch.randint(0, 2**32 - 1, (1,)).item()) for _ in range(trials)]


def _on(value, device: str):
    """``value`` with its tensors on ``device``: a tensor, or a list or tuple of values (others as they are)."""
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, (list, tuple)):
        return type(value)(_on(v, device) for v in value)
    return value


def _drawn(prob, seed: int, device: str) -> list:
    """``get_inputs()`` under ``seed``, on ``device``."""
    set_seed(seed)
    return _on(list(prob.get_inputs()), device)


@dataclass
class Graded:
    """A solution graded in this process.

    Attributes:
        verdict: The checker's verdict over the trials (one case per trial seed).
        builds: The ``load_inline`` calls its import made.
        data: Median times (``ms``, ``eager_ms``, ``compile_ms``) when timed.
    """

    verdict: checker.Verdict
    builds: Builds
    data: dict = field(default_factory=dict)

    @property
    def build(self) -> str:
        return "cache hit" if self.builds.cached else f"built in {self.builds.seconds:.2f} s"


#: Bytes of inputs and outputs a reference keeps at most (:func:`reference`); a larger problem's are drawn
#: again by each grade (a level-1 problem's inputs reach 256 MiB a trial; its times are kept all the same).
KEPT_BYTES = 64 * 2**20


def _bytes(value) -> int:
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    return sum(map(_bytes, value)) if isinstance(value, (list, tuple)) else 0


def reference(problem, out, *, device: str = "cuda", trials: int = TRIALS, seed: int = SEED, time_it: bool = True,
              compile_ref: bool = True, rep_s: float = 0.1) -> dict:
    """Do the problem's half of grading once and save it to ``out`` (``torch.save``, on the CPU): ``Model``'s
    times when ``time_it`` (eager, and compiled if ``compile_ref`` on a GPU), and each trial's inputs, ``Model``'s
    outputs on them and the timed input, where they fit in :data:`KEPT_BYTES`. :func:`grade` with
    ``reference=out`` reads it; the arguments are :func:`grade`'s. Returns the times."""
    prob = import_file(Path(problem), "kernelbench_problem")
    seeds = trial_seeds(seed, trials)
    kept: dict = {"inputs": [], "outputs": []}
    with timing.gpu_access(exclusive=False), torch.no_grad():
        set_seed(seed)
        init = _on(prob.get_init_inputs(), device)
        set_seed(seed)
        model = prob.Model(*init).to(device)
    for s in seeds:
        args = _drawn(prob, s, "cpu")  # CPU work, outside the GPU's lock
        with timing.gpu_access(exclusive=False), torch.no_grad():
            mine = checker.copy(args) if device == "cpu" else _on(args, device)  # a copy: Model may write its inputs
            kept["outputs"].append(_on(model(*mine), "cpu"))
        kept["inputs"].append(args)
        if _bytes(args) * (trials + 1) + _bytes(kept["outputs"][0]) * trials > KEPT_BYTES:
            kept = {}  # too large to keep: each grade draws them (and runs Model) itself
            break
    args = _drawn(prob, seed, "cpu") if time_it or kept else None
    if kept:
        kept["timed"] = args
    times = {}
    if time_it:
        with timing.gpu_access(exclusive=False), torch.no_grad():
            args = _on(args, device)
        with timing.gpu_access(exclusive=True), torch.no_grad():
            times = _times(model, None, args, device, compile_ref, rep_s)
    torch.save({"seeds": seeds, **kept, **times}, Path(out))
    return times


def grade(problem, solution, *, loader: str = "jitlab", device: str = "cuda", trials: int = TRIALS, seed: int = SEED,
          time_it: bool = True, compile_ref: bool = True, rep_s: float = 0.1, imported=None,
          reference: str | None = None) -> Graded:
    """Grade one solution as KernelBench does: correctness over ``trials`` seeded inputs, then timing. Where
    worker processes share the GPU, checks share it and timing has it alone (:func:`timing.gpu_access`).

    Args:
        problem, solution: The two files.
        loader: Whose ``load_inline`` the solution gets (:func:`~jitlab.judge.kernelbench.import_solution`).
        device: ``"cuda"``, or ``"cpu"`` for a problem whose solution builds C++ only.
        time_it: Time a right solution, and ``Model`` in eager mode (and under ``torch.compile`` if
            ``compile_ref``, on a GPU), each with :func:`jitlab.judge.timing.time_fn` (``rep_s`` each).
        imported: ``(module, builds)`` from ``import_solution`` when the caller imported it already.
        reference: The problem's half, saved by :func:`reference` with the same arguments: what it holds
            (``Model``'s times; the inputs and ``Model``'s outputs) is used instead of being made again.

    Raises:
        CompileError, Exception: What importing the solution or making ``ModelNew`` raises.
    """
    prob = import_file(Path(problem), "kernelbench_problem")
    sol, builds = imported or import_solution(Path(solution), loader)
    if not hasattr(sol, "ModelNew"):
        raise ArgumentError(f"{solution}: defines no class ModelNew (KernelBench imports ModelNew from the solution)")
    saved = _saved(reference) if reference else {}
    seeds = trial_seeds(seed, trials)
    # Each trial's inputs, drawn on the CPU (as KernelBench draws them) before the GPU's lock is taken: a
    # lane that draws holds no other lane's timing back.
    drawn = saved["inputs"] if "inputs" in saved else [_drawn(prob, s, "cpu") for s in seeds]
    with timing.gpu_access(exclusive=False), torch.no_grad():
        set_seed(seed)
        init = _on(prob.get_init_inputs(), device)
        model = None
        if "outputs" not in saved or (time_it and "eager_ms" not in saved):
            set_seed(seed)
            model = prob.Model(*init).to(device)
        set_seed(seed)
        new = sol.ModelNew(*init).to(device)

        def inputs(size, trial_seed, dev):
            trial = seeds.index(trial_seed)
            # One list, not one entry per input: KernelBench lets a solution write its inputs (Model ran
            # first, on its own copy), and the checker's read-only rule looks at top-level tensors only.
            return {"inputs": _on(drawn[trial], dev), "trial": trial}

        def expected(inp):
            return _on(saved["outputs"][inp["trial"]], device) if "outputs" in saved else model(*inp["inputs"])

        verdict = checker.check(lambda inp: new(*inp["inputs"]), expected, inputs, sizes=["get_inputs()"],
                                seeds=seeds, device=device, name="ModelNew",
                                tolerance_override={"rtol": TOLERANCE, "atol": TOLERANCE})
    graded = Graded(verdict, builds)
    if verdict.passed and time_it:
        args = saved["timed"] if "timed" in saved else _drawn(prob, seed, "cpu")
        with timing.gpu_access(exclusive=False), torch.no_grad():
            args = _on(args, device)
        with timing.gpu_access(exclusive=True), torch.no_grad():
            graded.data = _times(None if "eager_ms" in saved else model, new, args, device, compile_ref, rep_s)
        graded.data.update({k: saved[k] for k in ("eager_ms", "compile_ms") if k in saved})
    return graded


def _saved(path: str) -> dict:
    """A reference :func:`reference` saved, or ``{}`` (the grade then does both halves itself) where it cannot
    be read back: a problem whose inputs hold what ``torch.load(weights_only=True)`` refuses."""
    try:
        return torch.load(path, weights_only=True)
    except Exception:  # noqa: BLE001 -- the full grade is always right, only slower
        return {}


def _times(model, new, args: list, device: str, compile_ref: bool, rep_s: float) -> dict:
    """Median ms of the solution (``new``, if any), and of ``Model`` (if any) eager and (GPU) compiled, on one
    input."""
    data = {}
    if new is not None:
        data["ms"] = timing.time_fn(lambda: new(*args), device, rep_s=rep_s).median
    if model is not None:
        data["eager_ms"] = timing.time_fn(lambda: model(*args), device, rep_s=rep_s).median
        if compile_ref and device == "cuda":
            compiled = torch.compile(model)
            data["compile_ms"] = timing.time_fn(lambda: compiled(*args), device, rep_s=rep_s).median
    return data


def mismatch_message(verdict: checker.Verdict) -> str:
    """``3 of 5 trials disagree with Model (atol = rtol = 0.01)``: the first line of a wrong solution's outcome."""
    wrong = sum(not c.ok for c in verdict.cases)
    return f"{wrong} of {len(verdict.cases)} trials disagree with Model (atol = rtol = {TOLERANCE:g})"
