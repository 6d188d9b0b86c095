"""What each kernel uses, as ptxas reports it: registers, shared/local/constant memory, spills.

``parse_resource_usage`` reads nvcc's (or NVRTC's) ``--resource-usage`` lines into a table by kernel
and arch, keyed by the name Python calls the kernel by (``demangle``); every build path stores it in
its manifest, and ``jitlab inspect`` reads it back. ``usage_lines`` is how ``jitlab build``, a
``%%cuda --compile-only`` cell and the playground's Build show it.
"""

from __future__ import annotations

import re

_RU_LINE = re.compile(r"Used (\d+) registers")


def parse_resource_usage(log: str) -> dict:
    """Per-kernel, per-arch resource usage from nvcc ``--resource-usage`` output.

    Returns:
        ``{kernel: {arch: {"registers", "shared", "local", "constant", "spill_stores", "spill_loads", "stack"}}}``
        keyed by the demangled kernel name.
    """
    usage: dict[str, dict[str, dict]] = {}
    current: tuple[str, str] | None = None
    spills: dict[tuple[str, str], dict] = {}
    for line in log.splitlines():
        m = re.search(r"Compiling entry function '(\S+)' for '(\S+)'", line)
        if m:
            current = (m.group(1), m.group(2))
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m and current:
            spills[current] = {"stack": int(m.group(1)), "spill_stores": int(m.group(2)), "spill_loads": int(m.group(3))}
            continue
        m = _RU_LINE.search(line)
        if m and current:
            rec = {"registers": int(m.group(1)), "shared": 0, "local": 0, "constant": 0}
            for amount, what in re.findall(r"(\d+) bytes (smem|lmem|cmem\[\d+\])", line):
                if what == "smem":
                    rec["shared"] += int(amount)
                elif what == "lmem":
                    rec["local"] += int(amount)
                else:
                    rec["constant"] += int(amount)
            rec.update(spills.get(current, {"stack": 0, "spill_stores": 0, "spill_loads": 0}))
            usage.setdefault(demangle(current[0]), {})[current[1]] = rec
            current = None
    return usage


def usage_text(r: dict) -> str:
    """One kernel's usage on one arch: ``32 registers, 0 B shared, 0 B local, 0 B constant`` (spills if any)."""
    spill = f", spills {r['spill_stores']}/{r['spill_loads']} B" if r.get("spill_stores") or r.get("spill_loads") else ""
    return f"{r['registers']} registers, {r['shared']} B shared, {r['local']} B local, {r['constant']} B constant{spill}"


def usage_lines(usage: dict) -> list[str]:
    """``kernel [arch]: …`` (:func:`usage_text`) for each kernel and arch of a build's resource table."""
    return [f"  {kernel} [{arch}]: {usage_text(r)}" for kernel, per_arch in sorted(usage.items())
            for arch, r in sorted(per_arch.items())]


def demangle(symbol: str) -> str:
    """``_Z5saxpyPfPKffi`` → ``saxpy``: the unqualified name is what Python calls it by."""
    m = re.match(r"_Z(?:N(?:\d+\w+?)*)?(\d+)", symbol)
    if not m or not symbol.startswith("_Z"):
        return symbol
    if symbol.startswith("_ZN"):
        rest, last = symbol[3:], symbol
        while rest and rest[0].isdigit():
            n = int(re.match(r"\d+", rest).group())
            digits = len(str(n))
            last, rest = rest[digits:digits + n], rest[digits + n:]
        return last
    n = int(m.group(1))
    start = 2 + len(m.group(1))
    return symbol[start:start + n]
