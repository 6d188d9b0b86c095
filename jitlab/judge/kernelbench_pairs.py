"""KernelBench pairs on disk, found without importing torch: a problem file and the solutions to it.

A **problem** is a Python file with ``class Model``, ``get_inputs()`` and ``get_init_inputs()``; a **solution**
has ``class ModelNew``; a **pair** is one of each, a folder with ``problem.py`` and ``solution.py`` or a problem
file followed by solution files. ``jitlab check`` reads them before it imports torch (3-4 s), so that torch's
precompiled headers are already being made by then (:mod:`jitlab.jit.torch_install`); loading and grading
them is :mod:`jitlab.judge.kernelbench`.
"""

from __future__ import annotations

import ast
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from jitlab.errors import ArgumentError


@dataclass
class Pair:
    """A problem file and one solution to it; ``name`` is the pair folder's name or the solution's stem."""

    problem: Path
    solution: Path
    name: str

    def key(self, **params) -> str:
        """A hash of both sources and the grading parameters: a rerun skips a pair with the same key."""
        h = hashlib.sha256()
        for p in (self.problem, self.solution):
            h.update(p.read_bytes() + b"\0")
        h.update(json.dumps(params, sort_keys=True).encode())
        return h.hexdigest()[:20]


def _top_names(path: Path) -> set[str]:
    """The classes and functions a Python file defines at its top level (empty if it does not parse)."""
    try:
        tree = ast.parse(path.read_text(errors="replace"))
    except (SyntaxError, ValueError, OSError):
        return set()
    return {n.name for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}


def is_problem(path: Path) -> bool:
    """A ``.py`` file defining ``Model`` and ``get_inputs``."""
    return path.suffix == ".py" and path.is_file() and {"Model", "get_inputs"} <= _top_names(path)


def is_solution(path: Path) -> bool:
    """A ``.py`` file defining ``ModelNew``, or any ``solution*.py`` (one that does not parse is graded as a failure)."""
    return path.suffix == ".py" and path.is_file() and (path.stem.startswith("solution") or "ModelNew" in _top_names(path))


def _pair_folders(folder: Path) -> list[Path]:
    """``folder`` itself if it holds a ``problem.py``, else its sub-folders that do."""
    if (folder / "problem.py").is_file():
        return [folder]
    return sorted(d for d in folder.iterdir() if d.is_dir() and (d / "problem.py").is_file())


def recognizes(paths) -> bool:
    """Whether ``jitlab check PATHS`` names KernelBench pairs: a ``.py`` file, or a folder of pair folders."""
    return any(Path(p).suffix == ".py" or (Path(p).is_dir() and _pair_folders(Path(p))) for p in paths)


def pairs(paths, problem: str | Path | None = None) -> list[Pair]:
    """The pairs that ``paths`` name, in order.

    Without ``problem``: a problem file pairs with the solution files after it; a pair folder gives its
    ``problem.py`` with each ``solution*.py`` in it; a folder of pair folders gives each of them. With
    ``problem``: every solution file named, or found in a folder, is graded against it.

    Raises:
        ArgumentError: A path that is neither, or a solution with no problem before it.
    """
    found: list[Pair] = []
    current = Path(problem) if problem else None
    if current is not None and not is_problem(current):
        raise ArgumentError(f"{current}: not a KernelBench problem (a .py file with class Model and get_inputs())")
    for p in map(Path, paths):
        if p.is_dir() and current is not None and problem:
            found += [Pair(current, s, _name(s)) for s in sorted(p.rglob("*.py")) if s != current and is_solution(s)]
        elif p.is_dir() and _pair_folders(p):
            for d in _pair_folders(p):
                found += [Pair(d / "problem.py", s, d.name if s.name == "solution.py" else f"{d.name}/{s.stem}")
                          for s in sorted(d.glob("solution*.py"))]
        elif is_problem(p) and not problem:
            current = p
        elif p.suffix == ".py" and p.is_file():
            if current is None:
                raise ArgumentError(f"{p}: a solution with no problem: name the problem file first "
                                    f"(jitlab check problem.py {p}) or pass --problem")
            found.append(Pair(current, p, _name(p)))
        else:
            raise ArgumentError(f"{p}: neither a KernelBench problem or solution (.py) nor a folder of pairs "
                                f"(folders holding problem.py and solution.py)")
    return found


def _name(solution: Path) -> str:
    return solution.parent.name if solution.name == "solution.py" else solution.stem
