// jitlab-cells: JupyterLab 4 highlights a notebook cell that starts with %%cuda or %%cpp as C++.
//
// JupyterLab gives every code cell of a notebook one language, the kernel's (Python), so a %%cuda
// cell's C++ was highlighted as Python. This plugin sets such a cell's mimetype to text/x-c++src (the
// C++ mode JupyterLab ships, @codemirror/lang-cpp) and gives the cell back the notebook's mimetype when
// the magic line goes. It is a hand-written federated-extension container, the shape JupyterLab's
// bootstrap loads (window._JUPYTERLAB[name] with init(shareScope) and get(module) -> factory): it
// imports no shared module (no tokens: notebook panels are found through app.shell and their
// models' signals), so there is nothing to bundle and no node build, at install time or ever.
// Served from share/jupyter/labextensions/jitlab-cells/ (pyproject's data-files).
var _JUPYTERLAB = (window._JUPYTERLAB = window._JUPYTERLAB || {});
(function () {
  "use strict";
  const CPP = "text/x-c++src";
  const MAGIC = /^%%(cuda|cpp)(\s|$)/;
  const seen = new WeakSet();

  /** A code cell whose source starts with %%cuda/%%cpp gets C++, and loses it when the line goes. */
  function follow(cell) {
    if (cell.type !== "code") return;
    const magic = MAGIC.test(cell.sharedModel.getSource());
    if (magic && cell.mimeType !== CPP) {
      cell.jitlabMimeType = cell.mimeType; // what the notebook gave it (its kernel's language)
      cell.mimeType = CPP;
    } else if (!magic && cell.mimeType === CPP && cell.jitlabMimeType) {
      cell.mimeType = cell.jitlabMimeType;
    }
    if (!seen.has(cell)) {
      seen.add(cell);
      cell.contentChanged.connect(() => follow(cell));
      cell.mimeTypeChanged.connect(() => follow(cell)); // the notebook resets it when the kernel says its language
    }
  }

  function watchModel(model) {
    if (!model || seen.has(model)) return;
    seen.add(model);
    for (const cell of model.cells) follow(cell);
    model.cells.changed.connect((_, change) => {
      if (change.type === "add" || change.type === "set") for (const cell of change.newValues) follow(cell);
    });
  }

  function watchPanel(widget) {
    const notebook = widget && widget.content;
    if (!notebook || !widget.context || seen.has(widget) || !("activeCellIndex" in notebook)) return;
    seen.add(widget);
    widget.context.ready.then(() => watchModel(notebook.model));
    if (notebook.modelChanged) notebook.modelChanged.connect(() => watchModel(notebook.model));
  }

  const plugin = {
    id: "jitlab-cells:magic-languages",
    description: "Highlight %%cuda and %%cpp cells as C++.",
    autoStart: true,
    activate(app) {
      const scan = () => {
        for (const widget of app.shell.widgets("main")) watchPanel(widget);
      };
      if (app.shell.layoutModified) app.shell.layoutModified.connect(scan);
      if (app.shell.currentChanged) app.shell.currentChanged.connect(scan);
      app.restored.then(scan);
    },
  };

  _JUPYTERLAB["jitlab-cells"] = {
    init() {}, // nothing shared: no scope to join
    get(module) {
      if (module !== "./extension") return Promise.reject(new Error(`jitlab-cells has no module ${module}`));
      return Promise.resolve(() => ({ __esModule: true, default: plugin }));
    },
  };
})();
