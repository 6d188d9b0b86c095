"""Generated Python (launchers, wrappers) is compiled once per text, and each exec still binds its own names."""

from jitlab.jit import pycode


def test_the_same_text_is_compiled_once_and_each_exec_binds_its_own_namespace():
    """Two builds with one signature share the code object; their functions call their own symbols."""
    src = "def _call(x):\n    return _sym(x)\n"
    first, again = pycode.compiled(src, "<w>"), pycode.compiled(src, "<w>")
    assert first is again and pycode.compiled(src + "\n", "<w>") is not first
    a, b = {"_sym": lambda x: x + 1}, {"_sym": lambda x: x * 10}
    exec(first, a)
    exec(again, b)
    assert a["_call"](2) == 3 and b["_call"](2) == 20
