// jitlab's code editor: CodeMirror 6 as an anywidget front end (jitlab/notebook/editor.py is the
// Python side). Synced traits: value, language ("cuda" | "cpp"), error_lines (1-based), read_only,
// height. Custom messages to Python: {event: "save", value} on Ctrl/Cmd-S, {event: "build", value} on
// Shift-Enter, each with the editor's text, so Python's handler reads what the user sees.
// Bundled by build.mjs into jitlab/notebook/static/editor.js: nothing is fetched at run time.

import {
  Annotation, Compartment, EditorSelection, EditorState, Prec, StateEffect, StateField, countColumn,
} from "@codemirror/state";
import {
  Decoration, EditorView, GutterMarker, MatchDecorator, ViewPlugin, drawSelection, gutter, highlightActiveLine,
  highlightActiveLineGutter, keymap, lineNumbers,
} from "@codemirror/view";
import { defaultKeymap, history, historyKeymap, indentLess, indentMore } from "@codemirror/commands";
import {
  HighlightStyle, bracketMatching, indentOnInput, indentUnit, syntaxHighlighting, syntaxTree,
} from "@codemirror/language";
import { cpp } from "@codemirror/lang-cpp";
import { tags as t } from "@lezer/highlight";

const SYNC_MS = 150; // typing is sent to Python at most this often
const TAB = 4;

// ---------------------------------------------------------------- look: JupyterLab's own variables
// Colors and fonts come from JupyterLab's theme variables (its CodeMirror theme uses the same), with
// its light theme's values as fallbacks for front ends without them (Colab, VS Code).
const jp = (name, fallback) => `var(--jp-${name}, ${fallback})`;

// "&.cm-editor": two classes, to win over JupyterLab's own `.cm-editor { border: 0 }`.
const theme = EditorView.theme({
  "&.cm-editor": {
    fontSize: jp("code-font-size", "13px"), color: jp("content-font-color1", "rgba(0,0,0,.87)"),
    backgroundColor: jp("layout-color0", "#fff"), border: `1px solid ${jp("border-color1", "#bdbdbd")}`,
    borderRadius: "2px",
  },
  "&.cm-editor.cm-focused": { outline: "none", borderColor: jp("brand-color1", "#1976d2") },
  ".cm-scroller": { fontFamily: jp("code-font-family", "ui-monospace, SFMono-Regular, Menlo, Consolas, monospace"),
                    lineHeight: jp("code-line-height", "1.3077") },
  ".cm-content": { caretColor: jp("editor-cursor-color", "#000"), padding: "4px 0" },
  ".cm-gutters": { backgroundColor: jp("layout-color2", "#eee"), color: jp("ui-font-color2", "#757575"),
                   borderRight: `1px solid ${jp("border-color2", "#e0e0e0")}` },
  ".cm-activeLine": { backgroundColor: "rgba(0, 0, 0, 0.035)" },
  ".cm-activeLineGutter": { backgroundColor: "rgba(0, 0, 0, 0.06)" },
  "&.cm-focused > .cm-scroller > .cm-selectionLayer .cm-selectionBackground, .cm-content ::selection":
    { backgroundColor: jp("editor-selected-focused-background", "#d7d4f0") },
  ".cm-selectionBackground": { backgroundColor: jp("editor-selected-background", "#d9d9d9") },
  "&.cm-focused .cm-matchingBracket": { backgroundColor: "rgba(0, 160, 0, 0.18)", outline: "1px solid #bbb" },
  ".cm-jitlab-error-line": { backgroundColor: "rgba(229, 57, 53, 0.14)" },
  ".cm-jitlab-error-gutter": { width: "14px" },
  ".cm-jitlab-error-marker": { color: jp("error-color1", "#d32f2f"), fontSize: "11px", textAlign: "center",
                               cursor: "default" },
});

const highlight = HighlightStyle.define([ // the rules of JupyterLab's own HighlightStyle, plus types
  { tag: t.keyword, color: jp("mirror-editor-keyword-color", "green"), fontWeight: "bold" },
  { tag: t.bool, color: jp("mirror-editor-keyword-color", "green"), fontWeight: "bold" },
  { tag: [t.atom, t.null], color: jp("mirror-editor-atom-color", "#88f") },
  { tag: t.number, color: jp("mirror-editor-number-color", "#080") },
  { tag: [t.definition(t.name), t.function(t.definition(t.variableName))], color: jp("mirror-editor-def-color", "#00f") },
  { tag: [t.typeName, t.standard(t.typeName)], color: jp("mirror-editor-variable-3-color", "#085") },
  { tag: [t.standard(t.variableName), t.special(t.name)], color: jp("mirror-editor-builtin-color", "green") },
  { tag: [t.special(t.variableName), t.self], color: jp("mirror-editor-variable-2-color", "#00366d") },
  { tag: t.propertyName, color: jp("mirror-editor-property-color", "#05a") },
  { tag: t.operator, color: jp("mirror-editor-operator-color", "#7800c2"), fontWeight: "bold" },
  { tag: t.comment, color: jp("mirror-editor-comment-color", "#408080"), fontStyle: "italic" },
  { tag: [t.string, t.character], color: jp("mirror-editor-string-color", "#ba2121") },
  { tag: [t.labelName, t.special(t.string), t.escape], color: jp("mirror-editor-string-2-color", "#708") },
  { tag: [t.meta, t.processingInstruction], color: jp("mirror-editor-meta-color", "#a2f") },
  { tag: t.bracket, color: jp("mirror-editor-bracket-color", "#997") },
]);

// ---------------------------------------------------------------- CUDA words on top of lang-cpp
// @lezer/cpp knows C++ only; CUDA's qualifiers and built-ins are marked by a regex over the visible
// text (skipping comments and strings) and styled like keywords and built-ins.
const CUDA_KEYWORDS = "__global__ __device__ __host__ __shared__ __constant__ __managed__ __restrict__ " +
  "__forceinline__ __noinline__ __launch_bounds__ __grid_constant__";
const CUDA_BUILTINS = "threadIdx blockIdx blockDim gridDim warpSize __syncthreads __syncwarp __threadfence " +
  "__shfl_sync __shfl_up_sync __shfl_down_sync __shfl_xor_sync __ballot_sync __any_sync __all_sync __ldg " +
  "atomicAdd atomicSub atomicMax atomicMin atomicExch atomicCAS atomicAnd atomicOr atomicXor";
const cudaKeyword = Decoration.mark({ class: "cm-cuda-keyword" });
const cudaBuiltin = Decoration.mark({ class: "cm-cuda-builtin" });
const KEYWORDS = new Set(CUDA_KEYWORDS.split(" "));
const words = (s) => s.split(" ").join("|");
const cudaMatcher = new MatchDecorator({
  regexp: new RegExp(`\\b(?:${words(CUDA_KEYWORDS)}|${words(CUDA_BUILTINS)})\\b`, "g"),
  decorate(add, from, to, match, view) {
    const node = syntaxTree(view.state).resolveInner(from, 1).name;
    if (/Comment|String|CharLiteral/.test(node)) return;
    add(from, to, KEYWORDS.has(match[0]) ? cudaKeyword : cudaBuiltin);
  },
});
const cudaWords = [
  ViewPlugin.define((view) => ({
    decorations: cudaMatcher.createDeco(view),
    update(u) { this.decorations = cudaMatcher.updateDeco(u, this.decorations); },
  }), { decorations: (p) => p.decorations }),
  EditorView.theme({
    ".cm-cuda-keyword, .cm-cuda-keyword *": { color: jp("mirror-editor-keyword-color", "green"), fontWeight: "bold" },
    ".cm-cuda-builtin, .cm-cuda-builtin *": { color: jp("mirror-editor-builtin-color", "green") },
  }),
];
const languageOf = (name) => (name === "cuda" ? [cpp(), cudaWords] : [cpp()]);

// ---------------------------------------------------------------- error lines
// A line decoration per error line, mapped through edits; the gutter shows a marker beside each.
const setErrors = StateEffect.define();
const errorLine = Decoration.line({ class: "cm-jitlab-error-line" });
const errorField = StateField.define({
  create: () => Decoration.none,
  update(marks, tr) {
    marks = marks.map(tr.changes);
    for (const e of tr.effects) {
      if (e.is(setErrors)) marks = Decoration.set(e.value.map((n) => errorLine.range(tr.state.doc.line(n).from)), true);
    }
    return marks;
  },
  provide: (f) => EditorView.decorations.from(f),
});
const errorMarker = new (class extends GutterMarker {
  toDOM() {
    const d = document.createElement("div");
    d.className = "cm-jitlab-error-marker";
    d.textContent = "●";
    d.title = "compile error on this line";
    return d;
  }
})();
const errorGutter = gutter({
  class: "cm-jitlab-error-gutter",
  lineMarker(view, line) {
    let hit = false;
    view.state.field(errorField).between(line.from, line.from, () => { hit = true; return false; });
    return hit ? errorMarker : null;
  },
  lineMarkerChange: (u) => u.startState.field(errorField) !== u.state.field(errorField),
});

// ---------------------------------------------------------------- keys
function insertSpaces(view) { // Tab: spaces to the next multiple of 4 columns; with a selection, indent it
  if (view.state.readOnly) return false;
  if (view.state.selection.ranges.some((r) => !r.empty)) return indentMore(view);
  view.dispatch(view.state.changeByRange((r) => {
    const line = view.state.doc.lineAt(r.head);
    const n = TAB - (countColumn(line.text.slice(0, r.head - line.from), TAB) % TAB);
    return { changes: { from: r.head, insert: " ".repeat(n) }, range: EditorSelection.cursor(r.head + n) };
  }), { scrollIntoView: true, userEvent: "input" });
  return true;
}

/** The smallest change turning a into b (common prefix and suffix kept), so the cursor maps through it. */
function diff(a, b) {
  let p = 0;
  const n = Math.min(a.length, b.length);
  while (p < n && a.charCodeAt(p) === b.charCodeAt(p)) p++;
  let s = 0;
  while (s < n - p && a.charCodeAt(a.length - 1 - s) === b.charCodeAt(b.length - 1 - s)) s++;
  return { from: p, to: a.length - s, insert: b.slice(p, b.length - s) };
}

const fromModel = Annotation.define(); // marks document changes that came from Python

// ---------------------------------------------------------------- the widget
function render({ model, el }) {
  const language = new Compartment(), readOnly = new Compartment();
  let timer = null; // a pending send of the text: the user is typing

  const flush = () => { // send the text to Python now, if it has changed since the last send
    if (timer === null) return;
    clearTimeout(timer);
    timer = null;
    model.set("value", view.state.doc.toString());
    model.save_changes();
  };
  // The event carries the text too: ipywidgets may hold a state update back while an earlier one is unanswered,
  // but sends a custom message at once, so Python could see the event before the value it is about.
  const send = (event) => () => { flush(); model.send({ event, value: view.state.doc.toString() }); return true; };
  const readOnlyExt = (ro) => [EditorState.readOnly.of(ro), EditorView.editable.of(!ro)];

  const view = new EditorView({
    parent: el,
    state: EditorState.create({
      doc: model.get("value"),
      extensions: [
        // stopPropagation: JupyterLab (which listens on the document, bubbling) must not also save
        // the notebook or run the cell.
        Prec.highest(keymap.of([
          { key: "Mod-s", run: send("save"), preventDefault: true, stopPropagation: true },
          { key: "Shift-Enter", run: send("build"), preventDefault: true, stopPropagation: true },
          { key: "Tab", run: insertSpaces, shift: indentLess },
        ])),
        keymap.of([...defaultKeymap, ...historyKeymap]),
        errorGutter, lineNumbers(), highlightActiveLineGutter(), highlightActiveLine(), drawSelection(),
        history(), bracketMatching(), indentOnInput(), indentUnit.of(" ".repeat(TAB)), EditorState.tabSize.of(TAB),
        syntaxHighlighting(highlight), theme, errorField,
        language.of(languageOf(model.get("language"))), readOnly.of(readOnlyExt(model.get("read_only"))),
        EditorView.updateListener.of((u) => {
          if (!u.docChanged || u.transactions.every((tr) => tr.annotation(fromModel))) return;
          clearTimeout(timer);
          timer = setTimeout(flush, SYNC_MS);
        }),
        EditorView.domEventHandlers({ blur: flush }),
      ],
    }),
  });

  const onValue = () => { // Python set the text: apply it unless the user is typing (their edit wins)
    const doc = view.state.doc.toString(), text = model.get("value");
    if (text === doc || timer !== null) return;
    view.dispatch({ changes: diff(doc, text), annotations: fromModel.of(true) });
  };
  const onErrors = () => { // mark the lines; bring the first into view inside the editor, not the page
    const doc = view.state.doc;
    const lines = (model.get("error_lines") || []).filter((n) => Number.isInteger(n) && n >= 1 && n <= doc.lines);
    view.dispatch({ effects: setErrors.of(lines) });
    if (lines.length) {
      view.requestMeasure({
        read: () => view.lineBlockAt(doc.line(lines[0]).from).top,
        write: (top) => { view.scrollDOM.scrollTop = Math.max(0, top - view.scrollDOM.clientHeight / 3); },
      });
    }
  };
  const onLanguage = () => view.dispatch({ effects: language.reconfigure(languageOf(model.get("language"))) });
  const onReadOnly = () => view.dispatch({ effects: readOnly.reconfigure(readOnlyExt(model.get("read_only"))) });
  const onHeight = () => { view.dom.style.height = model.get("height") || ""; };

  const handlers = { "change:value": onValue, "change:error_lines": onErrors, "change:language": onLanguage,
                     "change:read_only": onReadOnly, "change:height": onHeight };
  for (const [name, fn] of Object.entries(handlers)) model.on(name, fn);
  onHeight();
  onErrors();
  el.classList.add("jitlab-code-editor");

  return () => {
    flush();
    for (const [name, fn] of Object.entries(handlers)) model.off(name, fn);
    view.destroy();
  };
}

export default { render };
