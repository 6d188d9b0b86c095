"""The code editor widget without a browser: its Python side and the committed JavaScript bundle.

Messages from the browser are fed through ipywidgets' own comm handler (``Widget._handle_msg``), as
the kernel would: a state update, then a custom ``{"event": ...}`` message. The bundle is checked as
a file: present, an ES module with a default export, nothing fetched from the network, and built
from the current ``js/editor/`` sources (its banner's hash). ``tests/test_editor_browser.py`` drives
it in Chromium.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import traitlets

from jitlab.notebook.editor import BUNDLE, Editor

ROOT = Path(__file__).resolve().parent.parent
JS = ROOT / "js" / "editor"
BANNER = re.compile(r"/\* jitlab-editor sha256:([0-9a-f]{64}) ")


def _from_browser(editor: Editor, *, state: dict | None = None, event: str | None = None,
                  text: str | None = None) -> None:
    """Deliver what the front end sends: a state update and/or a custom message (with the editor's ``text``), in
    that order."""
    if state is not None:
        editor._handle_msg({"content": {"data": {"method": "update", "state": state, "buffer_paths": []}},
                            "buffers": []})
    if event is not None:
        content = {"event": event, **({"value": text} if text is not None else {})}
        editor._handle_msg({"content": {"data": {"method": "custom", "content": content}}, "buffers": []})


def _inputs_hash() -> str:
    """The hash js/editor/build.mjs writes into the banner: each input's relative path and text
    (CRLF read as LF), in sorted path order."""
    files = ["build.mjs", "package.json", "package-lock.json"]
    files += [p.relative_to(JS).as_posix() for p in (JS / "src").rglob("*.js")]
    h = hashlib.sha256()
    for f in sorted(files):
        text = (JS / f).read_text(encoding="utf-8").replace("\r\n", "\n")
        h.update(f"{f}\0{text}\0".encode())
    return h.hexdigest()


# ---------------------------------------------------------------------- the widget's Python side

def test_save_key_calls_on_save_with_the_latest_text():
    """Ctrl-S's message reaches on_save callbacks after the text sent just before it."""
    ed = Editor("int x;\n")
    seen = []
    ed.on_save(lambda e: seen.append(("save", e.value)))
    ed.on_build(lambda e: seen.append(("build", e.value)))
    _from_browser(ed, state={"value": "int y;\n"}, event="save")
    assert seen == [("save", "int y;\n")]


def test_an_event_before_its_text_update_still_gives_the_callback_that_text():
    """ipywidgets may hold the browser's last value update back while an earlier one is unanswered and send the
    Ctrl-S message first: the message carries the editor's text, and the callback reads it."""
    ed = Editor("int x;\n")
    seen = []
    ed.on_save(lambda e: seen.append(e.value))
    _from_browser(ed, event="save", text="int x;\n// typed just before Ctrl-S\n")
    _from_browser(ed, state={"value": "int x;\n// typed just before Ctrl-S\n"})  # the held-back update, late
    assert seen == ["int x;\n// typed just before Ctrl-S\n"] and ed.value == seen[0]


def test_build_key_calls_on_build():
    """Shift-Enter's message reaches every on_build callback, with the editor."""
    ed = Editor("x")
    seen = []
    ed.on_build(lambda e: seen.append((1, e)))
    ed.on_build(lambda e: seen.append((2, e)))
    _from_browser(ed, event="build")
    assert seen == [(1, ed), (2, ed)]


def test_removed_callback_and_unknown_messages_are_ignored():
    """remove=True unregisters; a message without a known event calls nothing."""
    ed = Editor()
    seen = []
    cb = seen.append
    ed.on_save(cb)
    ed.on_save(cb, remove=True)
    _from_browser(ed, event="save")
    _from_browser(ed, event="explode")
    ed._handle_msg({"content": {"data": {"method": "custom", "content": "not a dict"}}, "buffers": []})
    assert seen == []


def test_traits_are_synced_with_their_defaults():
    """value, language, error_lines, read_only and height are synced; defaults suit a CUDA snippet."""
    ed = Editor("__global__ void k() {}")
    state = ed.get_state()
    assert {"value", "language", "error_lines", "read_only", "height", "_esm"} <= set(state)
    assert (ed.value, ed.language, ed.error_lines, ed.read_only, ed.height) == \
        ("__global__ void k() {}", "cuda", [], False, "24em")
    ed.language = "cpp"
    assert ed.get_state("language") == {"language": "cpp"}


def test_error_lines_keep_order_and_drop_duplicates():
    """The first line given is the one scrolled to; a tuple is accepted."""
    ed = Editor("a\nb\nc\n")
    ed.error_lines = (3, 1, 3)
    assert ed.error_lines == [3, 1]
    ed.error_lines = []
    assert ed.error_lines == []


@pytest.mark.parametrize("bad, message", [
    ([0], r"1-based line numbers \(>= 1\), got 0"),
    ([2, -1], r"got -1"),
    (["3"], r"1-based line numbers \(ints\), got '3'"),
    ([1.5], r"got 1.5"),
    ([True], r"got True"),
    (4, r"expected a list"),
])
def test_bad_error_lines_raise_a_clear_error(bad, message):
    """Line numbers must be ints >= 1; the error says so and shows the value."""
    ed = Editor()
    with pytest.raises(traitlets.TraitError, match=message):
        ed.error_lines = bad
    assert ed.error_lines == []


def test_unknown_language_is_refused():
    """Only cuda and cpp are highlighted."""
    with pytest.raises(traitlets.TraitError, match="cuda"):
        Editor(language="python")


# ---------------------------------------------------------------------- the bundle

def test_bundle_is_one_es_module_with_a_default_export():
    """static/editor.js exists, is what the widget loads, and ends with `export{… as default}`."""
    assert BUNDLE.is_file(), f"{BUNDLE} missing: run scripts/build-editor"
    text = BUNDLE.read_text(encoding="utf-8")
    assert Editor().get_state()["_esm"] == text  # what anywidget sends to the browser
    assert re.search(r"export\s*\{[^}]*\bas default\b[^}]*\}", text), "no default export in the bundle"


def test_bundle_fetches_nothing_at_run_time():
    """No import of a URL, no CDN; the only URL in it is the SVG namespace (a name, never fetched)."""
    text = BUNDLE.read_text(encoding="utf-8")
    assert not re.search(r"""\bimport\s*[{*("'`]|\}\s*from\s*["'`]""", text), \
        "the bundle imports another module: everything must be inlined"
    assert not re.search(r"esm\.sh|unpkg|jsdelivr|skypack|cdnjs|googleapis", text), "a CDN in the bundle"
    urls = set(re.findall(r"https?://[^\s\"'`)]+", text))
    assert urls <= {"http://www.w3.org/2000/svg"}, f"URLs in the bundle: {sorted(urls)}"


def test_bundle_is_built_from_the_current_sources():
    """The banner's sha256 equals the hash of js/editor's inputs: a stale bundle fails."""
    first = BUNDLE.read_text(encoding="utf-8").split("\n", 1)[0]
    m = BANNER.match(first)
    assert m, f"{BUNDLE.name} has no jitlab-editor banner: run scripts/build-editor"
    assert m.group(1) == _inputs_hash(), (
        f"{BUNDLE.relative_to(ROOT)} is stale (js/editor changed since it was built): run scripts/build-editor")


def test_bundle_imports_in_node():
    """Node imports the bundle (no DOM needed until render) and finds render() on the default export."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("node not installed (only this extra check needs it)")
    script = f"const m = await import({BUNDLE.as_uri()!r}); console.log(typeof m.default.render)"
    out = subprocess.run([node, "--input-type=module", "-e", script], capture_output=True, text=True,
                         timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "function"
