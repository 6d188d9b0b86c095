// Bundle src/editor.js and the CodeMirror packages it imports into ONE minified ES module,
// jitlab/notebook/static/editor.js (committed: Colab and pip installs need no node). Run through
// scripts/build-editor, which does `npm ci` first.
//
// The bundle's first line records a sha256 of its inputs (this file, package.json,
// package-lock.json and src/*), hashed as tests/test_editor.py hashes them, so a test can tell a
// stale bundle. The licenses of the bundled packages are appended as one comment.

import { createHash } from "node:crypto";
import { readFileSync, readdirSync, writeFileSync, existsSync } from "node:fs";
import { dirname, join, relative, sep } from "node:path";
import { fileURLToPath } from "node:url";
import * as esbuild from "esbuild";

const here = dirname(fileURLToPath(import.meta.url));
const out = join(here, "..", "..", "jitlab", "notebook", "static", "editor.js");

/** sha256 over each input's relative path and text (CRLF read as LF), in sorted path order. */
function inputsHash() {
  const walk = (d) => readdirSync(join(here, d), { withFileTypes: true })
    .flatMap((e) => (e.isDirectory() ? walk(join(d, e.name)) : [join(d, e.name)]));
  const src = walk("src").filter((f) => f.endsWith(".js"));
  const files = ["build.mjs", "package.json", "package-lock.json", ...src].map((f) => f.split(sep).join("/")).sort();
  const h = createHash("sha256");
  for (const f of files) {
    const text = readFileSync(join(here, f), "utf8").replaceAll("\r\n", "\n");
    h.update(`${f}\0${text}\0`);
  }
  return h.digest("hex");
}

/** The license text of every npm package that ended up in the bundle, one entry per distinct text. */
function licenses(metafile) {
  const pkgs = new Set();
  for (const input of Object.keys(metafile.inputs)) {
    const m = input.match(/node_modules\/((?:@[^/]+\/)?[^/]+)\//);
    if (m) pkgs.add(m[1]);
  }
  const byText = new Map();
  for (const pkg of [...pkgs].sort()) {
    const dir = join(here, "node_modules", pkg);
    const file = readdirSync(dir).find((f) => /^licen[cs]e/i.test(f));
    const { version, license } = JSON.parse(readFileSync(join(dir, "package.json"), "utf8"));
    const text = file ? readFileSync(join(dir, file), "utf8").trim() : `${license} (no license file shipped)`;
    if (!byText.has(text)) byText.set(text, []);
    byText.get(text).push(`${pkg}@${version}`);
  }
  return [...byText].map(([text, names]) => `${names.join(", ")}:\n\n${text}`).join("\n\n---\n\n");
}

const hash = inputsHash();
const result = await esbuild.build({
  entryPoints: [join(here, "src", "editor.js")],
  bundle: true,
  format: "esm",
  minify: true,
  target: "es2020",
  legalComments: "none", // the licenses are appended below, complete
  metafile: true,
  write: false,
  logLevel: "warning",
});
const code = new TextDecoder().decode(result.outputFiles[0].contents);
const banner = `/* jitlab-editor sha256:${hash} (CodeMirror 6 bundle built by scripts/build-editor from js/editor; do not edit) */`;
const notice = `/*! Bundled packages and their licenses:\n\n${licenses(result.metafile).replaceAll("*/", "* /")}\n*/`;
writeFileSync(out, `${banner}\n${code}${notice}\n`);
console.log(`wrote ${relative(process.cwd(), out)} (${(existsSync(out) && readFileSync(out).length / 1024).toFixed(0)} KiB)`);
