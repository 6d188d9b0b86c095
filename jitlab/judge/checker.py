"""Correctness: a kernel against its torch reference, with reasons a learner can act on.

``check()`` runs the candidate over sizes × seeds and compares with the reference using one
per-dtype tolerance table. Guards, as the kernel judges use them:

* outputs allocated during the call are **poisoned** (NaN for floats, the max value for integers,
  through torch's ``fill_uninitialized_memory``), so elements a kernel never wrote are reported;
* inputs are compared with a copy taken before the call, so a kernel that **modifies its inputs**
  is reported;
* NaN/Inf disagreements are reported, never hidden by ``allclose``.

A failing case says how many elements are wrong, the max abs/rel error, the first wrong indices
with got/expected and, for a 1-D or 2-D launch, the ``(blockIdx, threadIdx)`` that wrote them.
"""

from __future__ import annotations

import contextlib
import html
import sys
from dataclasses import dataclass, field

import torch

from jitlab.jit import launch as launch_mod

#: (rtol, atol) per dtype; integers and bool compare exactly. "tf32" is for float32 outputs of
#: kernels that use TF32 tensor cores.
TOLERANCES: dict[str, tuple[float, float]] = {
    "float64": (1e-7, 1e-7),
    "float32": (1.3e-6, 1e-5),
    "tf32": (1e-3, 1e-4),
    "float16": (1e-3, 1e-5),
    "bfloat16": (1.6e-2, 1e-5),
}
MAX_SHOWN = 5


def tolerance(dtype: torch.dtype, override: dict | None = None, tf32: bool = False) -> tuple[float, float]:
    """``(rtol, atol)`` for a dtype from :data:`TOLERANCES`, with per-kernel overrides."""
    name = "tf32" if tf32 and dtype == torch.float32 else str(dtype).replace("torch.", "")
    rtol, atol = TOLERANCES.get(name, (0.0, 0.0))
    if override:
        rtol, atol = override.get("rtol", rtol), override.get("atol", atol)
    return rtol, atol


@dataclass
class Mismatch:
    """One wrong element."""

    index: tuple[int, ...]
    got: float
    expected: float
    thread: str = ""


@dataclass
class Case:
    """One (size, seed) comparison.

    Attributes:
        size: The size given to ``inputs``.
        seed: The seed given to ``inputs``.
        reasons: Why it failed; empty when it passed.
        wrong: How many elements are wrong.
        total: How many elements were compared.
        max_abs: Largest absolute error over finite pairs.
        max_rel: Largest relative error over finite pairs.
        mismatches: The first few wrong elements.
        raised: The type of the exception the candidate raised instead of returning (``LaunchError``
            for a C++ exception in a kernel-only function, ``RuntimeError`` for one in a torch-style
            function, ``ArgumentError`` …); ``""`` when it returned.
    """

    size: int
    seed: int
    reasons: list[str] = field(default_factory=list)
    wrong: int = 0
    total: int = 0
    max_abs: float = 0.0
    max_rel: float = 0.0
    mismatches: list[Mismatch] = field(default_factory=list)
    raised: str = ""

    @property
    def ok(self) -> bool:
        return not self.reasons


@dataclass
class Verdict:
    """The result of :func:`check`: ``bool(verdict)`` is whether every case passed."""

    name: str
    cases: list[Case]

    @property
    def passed(self) -> bool:
        return all(c.ok for c in self.cases)

    def __bool__(self) -> bool:
        return self.passed

    @property
    def first_failure(self) -> Case | None:
        return next((c for c in self.cases if not c.ok), None)

    @property
    def reasons(self) -> list[str]:
        f = self.first_failure
        return f.reasons if f else []

    def __str__(self) -> str:
        if self.passed:
            sizes = sorted({c.size for c in self.cases})
            return f"{self.name}: PASS ({len(self.cases)} cases, sizes {', '.join(map(str, sizes))})"
        f = self.first_failure
        failed = sum(not c.ok for c in self.cases)
        lines = [f"{self.name}: FAIL ({failed} of {len(self.cases)} cases), first at size {f.size}, seed {f.seed}:"]
        lines += [f"  - {r}" for r in f.reasons]
        if f.mismatches:
            threads = any(m.thread for m in f.mismatches)  # no column for C++ on the CPU: nothing to attribute
            lines.append(f"  {'index':<16}{'got':>14}{'expected':>14}" + ("  thread" if threads else ""))
            for m in f.mismatches:
                lines.append(f"  {str(m.index):<16}{m.got:>14.6g}{m.expected:>14.6g}" + (f"  {m.thread}" if threads else ""))
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        e = html.escape
        if self.passed:
            return f"<div><b style='color:#1a7f37'>PASS</b> {e(str(self))}</div>"
        f = self.first_failure
        threads = any(m.thread for m in f.mismatches)  # the "written by" column only when a launch is known
        rows = "".join(f"<tr><td>{e(str(m.index))}</td><td>{m.got:.6g}</td><td>{m.expected:.6g}</td>"
                       + (f"<td>{e(m.thread)}</td>" if threads else "") + "</tr>" for m in f.mismatches)
        reasons = "".join(f"<li>{e(r)}</li>" for r in f.reasons)
        head = "<th>index</th><th>got</th><th>expected</th>" + ("<th>written by</th>" if threads else "")
        table = f"<table><tr>{head}</tr>{rows}</table>" if rows else ""
        return (f"<div><b style='color:#cf222e'>FAIL</b> {e(self.name)} at size {f.size}, seed {f.seed}"
                f"<ul>{reasons}</ul>{table}</div>")


@contextlib.contextmanager
def poisoned_allocations():
    """Fill memory from ``torch.empty*`` (Python or C++) with NaN / the max integer while active."""
    import torch.utils.deterministic as det

    was_det = torch.are_deterministic_algorithms_enabled()
    was_warn = torch.is_deterministic_algorithms_warn_only_enabled()
    was_fill = det.fill_uninitialized_memory
    deterministic(True, warn_only=True)
    det.fill_uninitialized_memory = True
    try:
        yield
    finally:
        det.fill_uninitialized_memory = was_fill
        deterministic(was_det, warn_only=was_warn)


def deterministic(mode: bool, warn_only: bool) -> None:
    """``torch.use_deterministic_algorithms(mode, warn_only=...)`` without importing ``torch._inductor``.

    torch's function imports inductor's config to set its ``deterministic`` option too (0.9 s of imports
    on 2 cores, ~5 s where torch's files have no bytecode cache, once per process). Inductor's option is
    set as torch sets it when inductor is loaded already; one loaded later starts from its own default,
    which only decides how code it compiles is tuned, not what ``torch.empty`` holds.
    """
    torch._C._set_deterministic_algorithms(mode, warn_only=warn_only)
    inductor = sys.modules.get("torch._inductor.config")
    if inductor is not None:
        inductor.deterministic = mode


def copy(value):
    """``value`` with every tensor in it cloned (dicts, lists and tuples copied around them)."""
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, dict):
        return {k: copy(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(copy(v) for v in value)
    return value


def synchronize(device: str) -> None:
    if device == "cuda" and torch.cuda.is_available():
        torch.cuda.synchronize()


def check(run, reference=None, inputs=None, *, sizes=None, seeds=(0,), device: str = "cuda",
          tolerance_override: dict | None = None, tf32: bool = False, name: str = "kernel", block: tuple | None = None,
          **snippet_options):
    """Compare ``run(inp)`` with ``reference(inp)`` over every size and seed.

    ``jitlab.check(path, ...)`` checks a snippet file against its ``NAME.ref.py`` instead: that is
    :func:`jitlab.worker.isolate.check`, the layer above, which sends callables here.

    Args:
        run: The candidate: ``run(inp) -> output`` (a tensor, a tuple of tensors, or a string);
            or a snippet path.
        reference: The torch reference with the same signature.
        inputs: ``inputs(size, seed, device) -> dict`` making one case's inputs.
        sizes: Sizes to try; include awkward ones (1, 127, 129 …).
        seeds: Seeds to try at each size.
        device: ``"cuda"`` or ``"cpu"``.
        tolerance_override: ``{"rtol": …, "atol": …}`` replacing the dtype table's entry.
        tf32: Use the TF32 tolerance for float32 outputs.
        name: Shown in the verdict.
        block: The block shape of a launch the snippet makes itself (torch-style), for thread
            attribution; kernel-only launches are recorded automatically.
        **snippet_options: Refused: they belong to ``jitlab.check(path, ...)``.

    Returns:
        The :class:`Verdict`, with one :class:`Case` per size and seed.

    Raises:
        ArgumentError: A callable without ``reference``, ``inputs`` and ``sizes``, or path-only options.
    """
    if reference is None or inputs is None or sizes is None or snippet_options:
        from jitlab.errors import ArgumentError

        extra = f" ({', '.join(snippet_options)} apply to a snippet path)" if snippet_options else ""
        raise ArgumentError("check(run, reference, inputs, sizes=[...]) compares two callables; "
                            f"check('kernels/NAME.cu', isolate=True) checks a snippet against its NAME.ref.py{extra}")
    cases = []
    for size in sizes:
        for seed in seeds:
            inp = inputs(size, seed, device)
            expected = reference(copy(inp))
            before = copy(inp)
            case = Case(size, seed)
            launch_mod.last_launch[0] = None
            try:
                with poisoned_allocations():
                    got = run(inp)
                    synchronize(device)
            except Exception as e:  # a crashing candidate is a verdict, not a crash of the checker
                case.raised = type(e).__name__
                case.reasons.append(f"raised {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
                cases.append(case)
                continue
            launch = launch_mod.last_launch[0]
            case.reasons += _modified_inputs(before, inp)
            _compare(case, got, expected, tolerance_override, tf32, launch, block)
            cases.append(case)
    return Verdict(name, cases)


def _modified_inputs(before: dict, after: dict) -> list[str]:
    out = []
    for k, v in before.items():
        a = after.get(k)
        if isinstance(v, torch.Tensor) and isinstance(a, torch.Tensor):
            same = torch.equal(v, a) or (v.is_floating_point() and torch.equal(torch.nan_to_num(v), torch.nan_to_num(a))
                                         and torch.equal(v.isnan(), a.isnan()))
            if not same:
                n = int((v != a).sum()) if v.shape == a.shape else v.numel()
                out.append(f"the kernel modified its input `{k}` ({n} elements changed); inputs must stay read-only "
                           f"(write to an output, or clone an in/out argument first)")
    return out


def _compare(case: Case, got, expected, override, tf32, launch, block) -> None:
    if isinstance(expected, str):
        if got != expected:
            case.reasons.append(f"printed {got!r}, expected {expected!r}")
        return
    if isinstance(expected, (tuple, list)):
        if not isinstance(got, (tuple, list)) or len(got) != len(expected):
            case.reasons.append(f"returned {type(got).__name__}, expected {len(expected)} outputs")
            return
        for g, e in zip(got, expected):
            _compare(case, g, e, override, tf32, launch, block)
        return
    if not isinstance(got, torch.Tensor):
        case.reasons.append(f"returned {type(got).__name__}, expected a tensor")
        return
    if got.shape != expected.shape:
        case.reasons.append(f"shape {tuple(got.shape)}, expected {tuple(expected.shape)}")
        return
    if got.dtype != expected.dtype:
        case.reasons.append(f"dtype {str(got.dtype).replace('torch.', '')}, expected {str(expected.dtype).replace('torch.', '')}")
        return
    g, e = got.detach(), expected.detach().to(got.device)
    case.total += g.numel()
    if not g.is_floating_point():
        wrong = g != e
        poison = (g == _int_max(g.dtype)) & wrong
        _report(case, g, e, wrong, launch, block, poison=poison, exact=True)
        return
    rtol, atol = tolerance(g.dtype, override, tf32)
    g32, e32 = (g.float(), e.float()) if g.dtype in (torch.float16, torch.bfloat16) else (g, e)
    both_finite = torch.isfinite(g32) & torch.isfinite(e32)
    diff = (g32 - e32).abs()
    close = both_finite & (diff <= atol + rtol * e32.abs())
    both_nan = torch.isnan(g32) & torch.isnan(e32)
    same_inf = torch.isinf(g32) & torch.isinf(e32) & (g32 == e32)
    wrong = ~(close | both_nan | same_inf)
    if both_finite.any():
        d = torch.where(both_finite, diff, torch.zeros_like(diff))
        case.max_abs = max(case.max_abs, float(d.max()))
        rel = d / e32.abs().clamp_min(torch.finfo(e32.dtype).tiny)
        case.max_rel = max(case.max_rel, float(torch.where(both_finite, rel, torch.zeros_like(rel)).max()))
    poison = torch.isnan(g32) & ~torch.isnan(e32)
    _report(case, g32, e32, wrong, launch, block, poison=poison, exact=False, rtol=rtol, atol=atol)


def _int_max(dtype: torch.dtype):
    return True if dtype == torch.bool else torch.iinfo(dtype).max


def _report(case, g, e, wrong, launch, block, poison, exact, rtol=0.0, atol=0.0) -> None:
    n_wrong = int(wrong.sum())
    if not n_wrong:
        return
    case.wrong += n_wrong
    total = g.numel()
    n_poison = int((poison & wrong).sum())
    if n_poison:
        what = "the poison value" if exact else "NaN"
        case.reasons.append(f"{n_poison} of {total} output elements were never written (still {what}, which "
                            f"outputs are filled with before the call)")
    nonfinite = 0
    if not exact:
        nonfinite = int((wrong & ~poison & ~(torch.isfinite(g) & torch.isfinite(e))).sum())
    if nonfinite:
        case.reasons.append(f"{nonfinite} elements disagree with torch on NaN/Inf")
    numeric = n_wrong - n_poison - nonfinite
    if numeric:
        if exact:
            case.reasons.append(f"{numeric} of {total} elements differ (integers compare exactly)")
        else:
            case.reasons.append(f"{numeric} of {total} elements differ beyond rtol={rtol:g}, atol={atol:g}: "
                                f"max abs error {case.max_abs:.3g}, max rel error {case.max_rel:.3g}")
    idx = torch.nonzero(wrong)[:MAX_SHOWN].tolist()
    for ix in idx:
        ix = tuple(ix)
        case.mismatches.append(Mismatch(ix, float(g[ix]), float(e[ix]), _thread_of(ix, tuple(g.shape), launch, block)))


def _thread_of(index: tuple[int, ...], shape: tuple[int, ...], launch, block) -> str:
    """The (blockIdx, threadIdx) that handles ``index`` under the usual 1-D/2-D index formulas."""
    if launch is not None:
        gx, _, _, bx, by, _ = launch[:6]
    elif block is not None:
        bx, by = (tuple(block) + (1,))[:2]
        gx = None
    else:
        return ""
    if by == 1 or len(shape) == 1:  # 1-D launch: i = blockIdx.x * blockDim.x + threadIdx.x (first grid-stride pass)
        flat = 0
        for i, n in zip(index, shape):
            flat = flat * n + i
        t = flat % (gx * bx) if gx else flat
        return f"block ({t // bx},) thread ({t % bx},)"
    if len(shape) == 2:  # 2-D launch: row = blockIdx.y * blockDim.y + threadIdx.y, col = ... .x
        row, col = index
        return f"block ({col // bx}, {row // by}) thread ({col % bx}, {row % by})"
    return ""
