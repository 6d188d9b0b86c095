"""Conventions every test module keeps, checked by reading tests/*.py (AST only: no test module is
imported): each test has a docstring whose first line says what it checks, and each test that needs a
GPU carries the `gpu` marker, so that a machine without one deselects it (conftest.py) instead of
failing it.

The GPU rule is conservative: it flags only code that plainly needs a CUDA device, found in the test,
in the module's helpers and fixtures it uses (and conftest.py's fixtures), and in Python code it
hands to another process as a string:

- a ``device="cuda"`` (or ``"cuda:N"``) keyword, ``.cuda()``, ``.to("cuda")``;
- a call of a ``torch.cuda`` function other than the queries ``is_available`` and ``device_count``;
- a launch (``grid=`` keyword) of a kernel from a ``jitlab.load(...)`` in the same function.

Such a use is fine under a ``gpu`` mark (on the function, its class, or the module's ``pytestmark``,
directly or through a name bound to it), and where it can only run with a GPU: in a test skipped by
``skipif(not torch.cuda.is_available())``, after an ``if not torch.cuda.is_available(): pytest.skip()``,
or inside ``if torch.cuda.is_available():``. Compile-only paths (``compile_only=True``,
``%%cuda --compile-only``) use none of these and need no mark.
"""

from __future__ import annotations

import ast
import re
import textwrap
from pathlib import Path

TESTS = Path(__file__).resolve().parent
MODULES = sorted(TESTS.glob("*.py"))
FIXTURES = TESTS / "fixtures" / "conventions"
CUDA_QUERIES = {"is_available", "device_count"}
CUDA_DEVICE = re.compile(r"cuda(:\d+)?")
GPU_AVAILABLE = "torch.cuda.is_available()"


# ---- reading a module ---------------------------------------------------------------------------
def _tests(tree: ast.Module) -> list[tuple[ast.FunctionDef, ast.ClassDef | None]]:
    """The test functions pytest collects: module-level test* functions and test* methods of Test* classes."""
    out = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
            out.append((node, None))
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            out += [(f, node) for f in node.body
                    if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and f.name.startswith("test")]
    return out


def docstring_problems(source: str, name: str = "<source>") -> list[str]:
    """'file:line test: why' for each test without a docstring whose first line says what it checks."""
    problems = []
    for fn, _ in _tests(ast.parse(source)):
        first = fn.body[0]
        if not (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)):
            problems.append(f"{name}:{fn.lineno} {fn.name}: no docstring")
        elif not first.value.value.split("\n", 1)[0].strip():
            problems.append(f"{name}:{fn.lineno} {fn.name}: the docstring's first line is empty")
    return problems


# ---- the GPU rule -------------------------------------------------------------------------------
def _is_fixture(fn: ast.FunctionDef) -> bool:
    return any(ast.unparse(d.func if isinstance(d, ast.Call) else d) in ("pytest.fixture", "fixture")
               for d in fn.decorator_list)


def _marks(expr: ast.expr) -> list[ast.expr]:
    """The marks in a decorator or a `pytestmark` value (a mark, or a list or tuple of them)."""
    return list(expr.elts) if isinstance(expr, (ast.List, ast.Tuple)) else [expr]


def _is_gpu_mark(mark: ast.expr, aliases: dict[str, ast.expr]) -> bool:
    if isinstance(mark, ast.Name) and mark.id in aliases:
        mark = aliases[mark.id]
    if isinstance(mark, ast.Call):
        mark = mark.func
    return ast.unparse(mark) in ("pytest.mark.gpu", "mark.gpu")


def _is_gpu_guard(mark: ast.expr, aliases: dict[str, ast.expr]) -> bool:
    """skipif(not torch.cuda.is_available(), ...): the test runs only where there is a GPU."""
    if isinstance(mark, ast.Name) and mark.id in aliases:
        mark = aliases[mark.id]
    return (isinstance(mark, ast.Call) and ast.unparse(mark.func) in ("pytest.mark.skipif", "mark.skipif")
            and bool(mark.args) and ast.unparse(mark.args[0]) == f"not {GPU_AVAILABLE}")


def _is_no_gpu_guard(mark: ast.expr, aliases: dict[str, ast.expr]) -> bool:
    """skipif(torch.cuda.is_available(), ...) (alone or or-ed with other conditions): the test runs only where
    there is no GPU, so its ``device="cuda"`` and launches test the no-GPU path (an error, the CPU emulator)."""
    if isinstance(mark, ast.Name) and mark.id in aliases:
        mark = aliases[mark.id]
    if not (isinstance(mark, ast.Call) and ast.unparse(mark.func) in ("pytest.mark.skipif", "mark.skipif") and mark.args):
        return False
    test = mark.args[0]
    parts = test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.Or) else [test]
    return any(ast.unparse(p) == GPU_AVAILABLE for p in parts)


def _only_with_gpu(test: ast.expr) -> bool:
    """`if torch.cuda.is_available():` (alone or and-ed with other conditions)."""
    parts = test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) else [test]
    return any(ast.unparse(p) == GPU_AVAILABLE for p in parts)


def _only_without_gpu(test: ast.expr) -> bool:
    return ast.unparse(test) == f"not {GPU_AVAILABLE}"


def _skips(body: list[ast.stmt]) -> bool:
    return any(isinstance(n, ast.Call) and ast.unparse(n.func) == "pytest.skip" for s in body for n in ast.walk(s))


def _string_code(node: ast.expr) -> ast.Module | None:
    """A string that is Python code (for `python -c`, a notebook cell, ...), parsed; None if it is not code."""
    if isinstance(node, ast.JoinedStr):
        text = "".join(v.value if isinstance(v, ast.Constant) else "_" for v in node.values)
    else:
        text = node.value
    if "cuda" not in text:
        return None
    try:
        return ast.parse(textwrap.dedent(text).strip("\n"))
    except SyntaxError:
        return None


def gpu_uses(node: ast.AST) -> list[str]:
    """'line: what' for each plain use of a CUDA device in `node`, outside GPU-only branches."""
    loaded = {t.id for n in ast.walk(node) if isinstance(n, ast.Assign) and _loads_for_a_gpu(n.value)
              for t in n.targets if isinstance(t, ast.Name)}
    uses: list[str] = []

    def visit(n: ast.AST) -> None:
        if isinstance(n, ast.If) and _only_with_gpu(n.test):
            children = n.orelse
        elif isinstance(n, ast.If) and _only_without_gpu(n.test):
            children = [n.test, *n.body]  # the else branch runs only with a GPU
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and _guarded_body(n.body):
            children = n.decorator_list
        elif isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant):
            children = []  # a docstring or a bare string: not code that runs
        elif isinstance(n, ast.JoinedStr) or (isinstance(n, ast.Constant) and isinstance(n.value, str)):
            code = _string_code(n)
            uses.extend(f"{n.lineno}: {u.split(': ', 1)[1]} (in code given as a string)"
                        for u in (gpu_uses(code) if code else []))
            children = [v.value for v in n.values if isinstance(v, ast.FormattedValue)] \
                if isinstance(n, ast.JoinedStr) else []
        else:
            uses.extend(f"{n.lineno}: {what}" for what in _use(n, loaded))
            children = list(ast.iter_child_nodes(n))
        for c in children:
            visit(c)

    visit(node)
    return uses


def _guarded_body(body: list[ast.stmt]) -> bool:
    """The function starts by skipping itself without a GPU: `if not torch.cuda.is_available(): pytest.skip(...)`."""
    return any(isinstance(s, ast.If) and _only_without_gpu(s.test) and _skips(s.body) for s in body)


def _use(n: ast.AST, loaded: set[str]) -> list[str]:
    """What in this one node needs a CUDA device."""
    if isinstance(n, ast.keyword) and n.arg == "device" and isinstance(n.value, ast.Constant) \
            and isinstance(n.value.value, str) and CUDA_DEVICE.fullmatch(n.value.value):
        return [f"device={n.value.value!r}"]
    if not isinstance(n, ast.Call):
        return []
    func = ast.unparse(n.func)
    if isinstance(n.func, ast.Attribute) and n.func.attr == "cuda" and not n.args:
        return [".cuda()"]
    if isinstance(n.func, ast.Attribute) and n.func.attr == "to" and n.args and isinstance(n.args[0], ast.Constant) \
            and isinstance(n.args[0].value, str) and CUDA_DEVICE.fullmatch(n.args[0].value):
        return [f".to({n.args[0].value!r})"]
    if func.startswith("torch.cuda.") and func.split(".")[2] not in CUDA_QUERIES:
        return [f"{func}()"]
    if any(k.arg == "grid" for k in n.keywords) and isinstance(n.func, ast.Attribute):
        owner = n.func.value
        if (isinstance(owner, ast.Name) and owner.id in loaded) or _loads_for_a_gpu(owner):
            return [f"a kernel launch ({func}(..., grid=...))"]
    return []


def _loads_for_a_gpu(n: ast.AST) -> bool:
    """A ``jitlab.load(...)`` call whose kernels launch on a GPU (not ``device="cpu"``, the CPU emulator)."""
    return isinstance(n, ast.Call) and ast.unparse(n.func) == "jitlab.load" and not any(
        k.arg == "device" and isinstance(k.value, ast.Constant) and k.value.value == "cpu" for k in n.keywords)


def unmarked_gpu_tests(source: str, name: str = "<source>", shared_fixtures: dict | None = None) -> list[str]:
    """'file:line test: uses ...' for each test (or the module itself) that needs a GPU without a `gpu` mark."""
    tree = ast.parse(source)
    aliases = {t.id: s.value for s in tree.body if isinstance(s, ast.Assign) for t in s.targets
               if isinstance(t, ast.Name) and t.id != "pytestmark"}
    module_marks = [m for s in tree.body if isinstance(s, ast.Assign)
                    and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in s.targets)
                    for m in _marks(s.value)]
    module_gpu = any(_is_gpu_mark(m, aliases) or _is_gpu_guard(m, aliases) or _is_no_gpu_guard(m, aliases)
                     for m in module_marks)
    functions = {s.name: s for s in tree.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))}
    fixtures = {**(shared_fixtures or {}), **{k: f for k, f in functions.items() if _is_fixture(f)}}
    problems = []

    top = [s for s in tree.body if not isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
    uses = [u for s in top for u in gpu_uses(s)]
    if uses and not module_gpu:
        problems.append(f"{name}: module-level code uses the GPU ({uses[0]}) without `pytestmark = pytest.mark.gpu`")

    for fn, cls in _tests(tree):
        marks = [m for d in (fn.decorator_list + (cls.decorator_list if cls else [])) for m in _marks(d)]
        if cls:
            marks += [m for s in cls.body if isinstance(s, ast.Assign)
                      and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in s.targets)
                      for m in _marks(s.value)]
        if module_gpu or any(_is_gpu_mark(m, aliases) or _is_gpu_guard(m, aliases) or _is_no_gpu_guard(m, aliases)
                             for m in marks):
            continue
        uses = [f"{where}: {u}" for where, f in _reach(fn, functions, fixtures) for u in gpu_uses(f)]
        if uses:
            problems.append(f"{name}:{fn.lineno} {fn.name}: needs a GPU ({uses[0]}) but is not marked gpu")
    return problems


def _reach(fn: ast.FunctionDef, functions: dict, fixtures: dict) -> list[tuple[str, ast.FunctionDef]]:
    """The test and what it runs of the module: helpers it names, fixtures it asks for, and theirs, transitively."""
    seen, todo, out = {fn.name}, [fn], []
    while todo:
        f = todo.pop()
        out.append((f.name, f))
        wanted = [a.arg for a in f.args.args + f.args.kwonlyargs if a.arg in fixtures]
        wanted += [n.id for n in ast.walk(f) if isinstance(n, ast.Name) and n.id in functions]
        for w in wanted:
            if w not in seen:
                seen.add(w)
                todo.append(fixtures.get(w) or functions[w])
    return out


def _conftest_fixtures() -> dict[str, ast.FunctionDef]:
    tree = ast.parse((TESTS / "conftest.py").read_text())
    return {s.name: s for s in tree.body if isinstance(s, ast.FunctionDef) and _is_fixture(s)}


# ---- the conventions, on the tree ---------------------------------------------------------------
def test_every_test_has_a_docstring_whose_first_line_says_what_it_checks():
    """Every test in tests/*.py has a docstring that starts on its opening line, with text."""
    problems = [p for path in MODULES for p in docstring_problems(path.read_text(), path.name)]
    found = sum(len(_tests(ast.parse(path.read_text()))) for path in MODULES)
    assert found > 100, f"only {found} tests found in {TESTS}"  # the scan sees the suite
    assert not problems, "\n".join(problems)


def test_every_test_that_needs_a_gpu_is_marked_gpu():
    """No unmarked test or module uses a CUDA device: itself, through its helpers and fixtures, or in code strings."""
    shared = _conftest_fixtures()
    problems = [p for path in MODULES if path.name != "conftest.py"
                for p in unmarked_gpu_tests(path.read_text(), path.name, shared)]
    assert not problems, "\n".join(problems)


# ---- the rules themselves, on the small modules in tests/fixtures/conventions/ ---------------------
def _fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_docstring_rule_flags_a_missing_or_late_first_line():
    """No docstring, or one whose text starts on the second line, is flagged; a one-line docstring passes."""
    assert docstring_problems(_fixture("docstrings.py"), "docstrings.py") == [
        "docstrings.py:4 test_none: no docstring",
        "docstrings.py:8 test_late: the docstring's first line is empty",
        "docstrings.py:18 test_method: no docstring",
    ]


def test_gpu_rule_flags_each_plain_use_of_a_cuda_device():
    """device="cuda", .cuda(), .to("cuda"), torch.cuda calls, launches, helpers, fixtures, code strings: all flagged."""
    problems = unmarked_gpu_tests(_fixture("gpu_unmarked.py"), "gpu_unmarked.py")
    assert problems[0].startswith("gpu_unmarked.py: module-level code uses the GPU (10: device='cuda')"), problems
    flagged = [p.split()[1].rstrip(":") for p in problems[1:]]
    assert flagged == ["test_device", "test_to", "test_synchronize", "test_launch", "test_helper", "test_fixture",
                       "test_subprocess", "test_other_branch", "test_method"], problems
    assert "(in code given as a string)" in problems[7] and "x: 19: device='cuda:0'" in problems[6], problems


def test_gpu_rule_accepts_marks_guards_and_cpu_only_code():
    """gpu marks (function, class, pytestmark, alias), GPU-only guards and CPU-only code pass the rule."""
    assert unmarked_gpu_tests(_fixture("gpu_marked.py"), "gpu_marked.py") == []
    assert unmarked_gpu_tests(_fixture("gpu_module.py"), "gpu_module.py") == []


def test_a_test_that_runs_only_without_a_gpu_needs_none():
    """A test skipped where torch sees a GPU (`skipif(torch.cuda.is_available())`, or an alias of it) tests the
    no-GPU path: its `device="cuda"` and launches (the CPU emulator by default) need no GPU."""
    body = 'def test_x():\n    """x."""\n    jitlab.load(p, device=GPU)\n    jitlab.load(p).k(y, grid=1, block=1)\n'
    body = body.replace("GPU", '"cuda"')  # spelled here so that this test's own source holds no device="cuda"
    guard = '@pytest.mark.skipif(torch.cuda.is_available(), reason="the no-GPU path")\n'
    assert unmarked_gpu_tests(guard + body) == []
    assert unmarked_gpu_tests(f"no_gpu = {guard[1:]}\n@no_gpu\n" + body) == []
    assert len(unmarked_gpu_tests(body)) == 1


def test_a_launch_on_the_cpu_emulator_needs_no_gpu():
    """``jitlab.load(p, device="cpu").k(..., grid=...)`` runs on the CPU emulator: no GPU; without device= it needs one."""
    src = 'def test_x():\n    """x."""\n    jitlab.load(p, device="cpu").k(y, grid=1, block=1)\n'
    assert unmarked_gpu_tests(src) == []
    assert unmarked_gpu_tests(src.replace(', device="cpu"', "")) != []
