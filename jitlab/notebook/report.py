"""What a playground step reports: one status line, an HTML table, the bench chart.

Plain functions of the step's values (verdicts, bench results, an A/B verdict); the session calls
them, the widgets show what they return.
"""

from __future__ import annotations

import html
import io
from pathlib import Path

from jitlab.errors import CompileError
from jitlab.jit.resources import usage_lines


def compile_status(e: CompileError) -> str:
    """One line naming the first compile error at the user's file:line."""
    d = next((d for d in e.diagnostics if d.severity != "warning"), None)
    if d is None:
        return f"compile error: {e.summary}"
    col = f":{d.column}" if d.column else ""
    return f"compile error at {Path(d.path).name}:{d.line}{col}: {d.message}"


def resources_html(usage: dict, log: str = "") -> str:
    """A compile-only build's registers, shared/local memory and spills per kernel and arch, shown
    open, with the build's log folded under it."""
    lines = usage_lines(usage) or ["  (ptxas reported no kernels)"]
    folded = f"<details><summary>log</summary><pre>{html.escape(log)}</pre></details>" if log.strip() else ""
    return f'<pre class="jitlab-resources">{html.escape(chr(10).join(lines))}</pre>{folded}'


def verdict_status(verdicts) -> str:
    failed = [v for v in verdicts if not v.passed]
    if failed:
        v = failed[0]
        f = v.first_failure
        return f"FAIL: {v.name} at size {f.size}, seed {f.seed}: {v.reasons[0]}"
    cases = sum(len(v.cases) for v in verdicts)
    sizes = sorted({c.size for v in verdicts for c in v.cases})
    versions = f"{len(verdicts)} versions, " if len(verdicts) > 1 else ""
    return f"PASS: {versions}{cases} cases, sizes {', '.join(map(str, sizes))}"


def bench_status(rows) -> str:
    wrong = [r for r in rows if not r.verdict.passed]
    if wrong:
        return f"FAIL: not timed, {wrong[0].name} is wrong at size {wrong[0].size}: {wrong[0].verdict.reasons[0]}"
    best = min(rows, key=lambda r: r.timing.median)
    parts = [f"bench: {best.name} @ {best.size}: {ms(best.timing.median)}"]
    tp = best.throughput
    if tp:
        parts.append(str(tp) + (f" ({tp.of_roof})" if tp.roof else ""))
    if best.torch:
        parts.append(str(best.torch))
    return ", ".join(parts)


def ms(ms: float) -> str:
    return f"{ms * 1000:.1f} µs" if ms < 1 else f"{ms:.3f} ms"


def bench_table(rows) -> str:
    """The bench results as an HTML table; a wrong version shows its verdict instead of times.

    The columns are ``jitlab run``'s: "throughput" in GB/s (memory-bound) or TFLOP/s (compute-bound),
    "% of roof" naming the roof; the ratio columns read "× faster than", with the quartiles' range,
    or say why they give no verdict (:class:`jitlab.judge.benchmark.Comparison`). The torch column
    names torch's thread count on the CPU.
    """
    head = ["version", "size", "time (median)", "IQR", "throughput", "% of roof", "torch", "× faster than torch",
            "× faster than torch.compile"]
    body = []
    for r in rows:
        if not r.timing:
            body.append(f"<tr><td>{html.escape(r.name)}</td><td>{r.size}</td><td colspan='{len(head) - 2}'>"
                        f"not timed: {html.escape('; '.join(r.verdict.reasons))}</td></tr>")
            continue
        tp, t = r.throughput, r.torch_timing
        threads = f" ({t.threads} thread{'s' if t.threads != 1 else ''})" if t and t.threads else ""
        cells = [r.name, str(r.size), ms(r.timing.median), ms(r.timing.iqr), str(tp) if tp else "",
                 tp.of_roof if tp else "", ms(t.median) + threads if t else "",
                 *(c.cell() if c else "" for c in (r.torch, r.compiled))]
        body.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>")
    return ("<table><tr>" + "".join(f"<th>{h}</th>" for h in head) + "</tr>" + "".join(body) + "</table>")


def bench_figure(rows, title: str) -> bytes:
    """A bar chart of each timed version beside torch (GB/s when every row has a byte count); PNG bytes.

    Uses ``matplotlib.figure.Figure`` directly: pyplot is not thread-safe and would switch the
    notebook's backend.
    """
    from matplotlib.figure import Figure

    timed = [r for r in rows if r.timing]
    bw = all(r.gbps for r in timed)
    bars = [(f"{r.name} @ {r.size}", r.gbps if bw else r.timing.median, "tab:blue") for r in timed]
    by_size = {r.size: r for r in timed}  # torch is timed beside every row; one bar per size is enough
    for size, r in by_size.items():
        if r.torch_timing:
            bars.append((f"torch @ {size}", r.torch_gbps if bw else r.torch_timing.median, "0.45"))
        if r.compiled_timing:
            gb = r.bytes_moved / (r.compiled_timing.median * 1e-3) / 1e9 if bw else r.compiled_timing.median
            bars.append((f"torch.compile @ {size}", gb, "0.7"))
    fig = Figure(figsize=(6.5, 1.2 + 0.4 * len(bars)))
    ax = fig.subplots()
    ax.barh([b[0] for b in bars], [b[1] for b in bars], color=[b[2] for b in bars])
    ax.invert_yaxis()
    peak = (timed[0].peak or {}).get("copy_gbps") if timed else None
    if bw and peak:
        ax.axvline(peak, color="red", linestyle=":", label=f"measured copy peak {peak:.0f} GB/s")
        ax.legend(fontsize=8)
    ax.set_xlabel("GB/s (higher is better)" if bw else "median time, ms (lower is better)")
    ax.set_title(title)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    return buf.getvalue()


def ab_status(v, label: str, size: int) -> str:
    """One line: the current version is faster / the same / slower than the earlier one."""
    if v.verdict == "busy":
        return f"A/B @ {size}: machine busy ({v.why}): no verdict ({v.speedup:.2f}x)"
    if v.verdict == "same":
        return f"A/B @ {size}: current is the same as {label} ({v.speedup:.2f}x, inside the noise)"
    return f"A/B @ {size}: current is {v.verdict} than {label} ({v.speedup:.2f}x)"


def ab_table(v, label: str, size: int) -> str:
    rows = [(f"A: {label}", v.a), ("B: current", v.b)]
    body = "".join(f"<tr><td>{html.escape(n)}</td><td>{ms(t.median)}</td><td>{ms(t.iqr)}</td><td>{len(t.samples)}</td></tr>"
                   for n, t in rows)
    return (f"<div><b>{html.escape(ab_status(v, label, size))}</b><table><tr><th>version</th><th>median</th>"
            f"<th>IQR</th><th>samples</th></tr>{body}</table></div>")
