"""The package's shape: the pipeline's layers import downwards only, with no cycle and no reach into
the package root or another module's private names.

Every ``import`` of a jitlab module counts, the ones inside functions too. The layers, lowest first:
the shared modules at the top level (config, errors, output, progress, snippets), then ``jit``
(parse → codegen/split → plan → build/cache → engines → load/launch; only ``jit`` imports ``jit.engines``),
``judge`` (refs, check, time, run), ``worker``
(subprocesses: the isolated worker, sanitizer, profiler), ``tools`` (inspect, export), ``notebook``
(session, panel, magics, exercises, lessons), and the front doors (``cli``, ``jitlab/__init__``).
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "jitlab"
LAYERS = {"config": 0, "errors": 0, "output": 0, "progress": 0, "snippets": 0, "jit": 1, "judge": 2, "worker": 3,
          "tools": 4, "notebook": 5, "cli": 6, "cli_args": 6, "__main__": 7, "": 7}
MAX_LINES = 400
#: Modules over MAX_LINES, each with its own ceiling: one job that reads best whole (docs/design.md,
#: "The layout", says why), or a split not made yet (named there). None may grow past its ceiling.
CEILINGS = {
    "jitlab.jit.parse": 470,     # the data model and the one tree-sitter walker that fills it
    "jitlab.jit.split": 440,     # one walker that splits a torch-style file (its host prelude is split_host_prelude.h)
    "jitlab.jit.launch": 520,    # the generated Python launcher and its argument checks, one pass over the params
}


def _modules() -> dict[str, Path]:
    out = {}
    for p in sorted(PACKAGE.rglob("*.py")):
        parts = ["jitlab", *p.relative_to(PACKAGE).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = p
    return out


MODULES = _modules()


@functools.cache
def _tree(path: Path) -> ast.Module:
    """The module's syntax tree, parsed once for all the tests here (each walks every module)."""
    return ast.parse(path.read_text())


@functools.cache
def _imports(name: str, path: Path) -> list[tuple[str, str | None, int]]:
    """``(module, imported name or None, line)`` for every import of a jitlab module in ``path``."""
    is_pkg = path.name == "__init__.py"
    found = []
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.Import):
            found += [(a.name, None, node.lineno) for a in node.names if a.name.split(".")[0] == "jitlab"]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")[: len(name.split(".")) - node.level + (1 if is_pkg else 0)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            if module.split(".")[0] == "jitlab":
                found += [(module, a.name, node.lineno) for a in node.names]
    return found


def _target(module: str, imported: str | None) -> str:
    """The jitlab module an import loads: ``from jitlab.jit import api`` loads ``jitlab.jit.api``."""
    if imported and f"{module}.{imported}" in MODULES:
        return f"{module}.{imported}"
    while module not in MODULES:
        module = module.rsplit(".", 1)[0]
    return module


def _graph() -> dict[str, set[str]]:
    return {m: {_target(mod, imp) for mod, imp, _ in _imports(m, p)} - {m} for m, p in MODULES.items()}


def _layer(module: str) -> int:
    parts = module.split(".")
    return LAYERS[parts[1] if len(parts) > 1 else ""]


def test_the_import_graph_has_no_cycle():
    """Tarjan's strongly connected components over every jitlab import: each one a single module."""
    graph = _graph()
    index, low, stack, on_stack, groups = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            groups.append(group)

    for v in graph:
        if v not in index:
            visit(v)
    assert [g for g in groups if len(g) > 1] == []


def test_the_data_spine_is_a_leaf():
    """jit/plan.py, the data every stage passes on (units, flags, objects, manifests), imports nothing of jitlab,
    and the planning stage takes its types from there and its header sets from header_sets.py, never from an
    engine (jit/engines/)."""
    assert _imports("jitlab.jit.plan", MODULES["jitlab.jit.plan"]) == []
    for stage in ("jitlab.jit.codegen", "jitlab.jit.module_unit", "jitlab.jit.ops", "jitlab.jit.header_sets"):
        assert [t for t in _graph()[stage] if t.startswith("jitlab.jit.engines")] == [], stage


def test_only_the_jit_imports_the_engines():
    """Nothing outside jitlab/jit/ imports jitlab.jit.engines: the layers above build through jitlab.build
    (jit/api.py) or jit/builder.py's build, the one entrance, which chooses the engine."""
    offenders = [f"{m} imports {t}" for m, targets in _graph().items() for t in targets
                 if t.startswith("jitlab.jit.engines") and not m.startswith("jitlab.jit.")]
    assert offenders == []


def test_layers_import_downwards_only():
    """A module imports modules of its own layer or lower ones: the pipeline reads top to bottom."""
    upward = [f"{m} (layer {_layer(m)}) imports {t} (layer {_layer(t)})"
              for m, targets in _graph().items() for t in targets if _layer(t) > _layer(m)]
    assert upward == []


def test_no_module_imports_the_package_root():
    """Inside the package, ``import jitlab`` / ``from jitlab import load`` never appear: each module
    imports what it uses from the module that owns it (the root is the public front door only)."""
    offenders = []
    for m, p in MODULES.items():
        if m in ("jitlab", "jitlab.__main__"):
            continue
        for module, imported, line in _imports(m, p):
            if module == "jitlab" and (imported is None or f"jitlab.{imported}" not in MODULES):
                offenders.append(f"{p.relative_to(PACKAGE.parent)}:{line}: {module} {imported or ''}".strip())
    assert offenders == []


def test_no_module_uses_another_modules_private_names():
    """``from jitlab.x import _name`` and ``x._name`` across modules: a shared helper is public where it lives."""
    offenders = []
    for m, p in MODULES.items():
        tree = _tree(p)
        aliases = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("jitlab"):
                for a in node.names:
                    target = _target(node.module, a.name)
                    if a.name.startswith("_") and not a.name.startswith("__"):
                        offenders.append(f"{m}:{node.lineno}: from {node.module} import {a.name}")
                    elif target != node.module:  # a module imported by name
                        aliases[a.asname or a.name] = target
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
                    and node.attr.startswith("_") and not node.attr.startswith("__") and aliases[node.value.id] != m):
                offenders.append(f"{m}:{node.lineno}: {node.value.id}.{node.attr}")
    assert offenders == []


@pytest.mark.parametrize("module", sorted(MODULES))
def test_modules_stay_small(module):
    """One job per module: at most ~400 lines, or its own ceiling (CEILINGS, with the reason)."""
    lines = MODULES[module].read_text().count("\n")
    assert lines <= CEILINGS.get(module, MAX_LINES), f"{module}: {lines} lines"


def test_the_front_door_lists_and_imports_every_public_name():
    """Every name of ``jitlab.__all__`` is there (the lazy ones imported on first use, each the object its
    module owns) and listed by ``dir(jitlab)``, which a notebook's tab completion reads."""
    import importlib

    import jitlab

    assert set(jitlab.__all__) <= set(dir(jitlab))
    for name in jitlab.__all__:
        assert getattr(jitlab, name) is not None, name
    for name, (module, attr) in jitlab._LAZY.items():
        owner = importlib.import_module(module)
        assert getattr(jitlab, name) is (getattr(owner, attr) if attr else owner), name
