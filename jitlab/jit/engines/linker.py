"""Linking: a build's cached objects → the importable module, or one relocatable object.

``link`` makes ``<name>.so`` from the objects, defining ``PyInit_<name>`` as the binding object's
module init at link time (``--defsym``, so host objects never depend on the build's name);
``relocatable`` keeps them as one ``ld -r`` object for compile-only builds. Both go through
``linkable``, which makes global, in copies of the device objects, exactly the file-local symbols
nvcc left that the host units refer to by name. Links of shared libraries use GNU gold where the compiler
finds it (:func:`fast`): a torch module links in a third of the time (docs/benchmarks.md).
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from jitlab import config
from jitlab.errors import ToolchainError
from jitlab.jit import answers, toolchain
from jitlab.jit.plan import Flags, Object, Unit, UnitError
from jitlab.jit.symbols import demangle, local_symbols


def link(objects: list[Object], name: str, folder: Path, flags: Flags) -> Path:
    """Link the objects into ``folder/<name>.so``, importable as ``name``.

    The linker defines ``PyInit_<name>`` as the binding object's module init (``--defsym``), so the
    host objects never depend on the build's name.

    Returns:
        The shared library.

    Raises:
        UnitError: The link failed (its log says why).
    """
    cxx = toolchain.require_tool(toolchain.cxx_path(), "c++")
    inputs, log = linkable(objects, folder)
    module = next((o for o in objects if o.unit.module), None)
    if module is not None:  # PyInit_<name> is another name for the binding object's init, made by the linker
        inputs.append(f"-Wl,--defsym=PyInit_{name}=PyInit_{module.extension}")
    so = folder / f"{name}.so"
    cmd = [cxx, "-shared", "-o", str(so), *map(str, inputs), *flags.ld]
    proc = run(cmd, flags.ld)
    log.append(" ".join(proc.args) + "\n" + proc.stdout + proc.stderr)
    (folder / "link.log").write_text("\n".join(log))
    if proc.returncode != 0:
        raise UnitError(Unit(name="link", compiler="cxx", text=""), "\n".join(log))
    return so


def fast(ldflags: list[str] = ()) -> list[str]:
    """``["-fuse-ld=gold"]`` where the C++ compiler links a shared library with GNU gold, else ``[]``;
    ``$JITLAB_LINKER`` names another (``lld``, ``mold``: ``-fuse-ld=`` takes it) or ``default`` (the compiler's own
    ``ld``). Nothing when the user's link flags choose a linker themselves, or after a link it failed
    (:func:`run`).

    A shared library's link reads the dynamic symbols of every library it names: GNU ld takes 0.85 s on this
    2-core VM for a module linked against torch's four libraries, gold 0.28 s.
    """
    if any("-fuse-ld=" in str(f) or "--ld-path=" in str(f) for f in ldflags):
        return []
    name = config.getenv("JITLAB_LINKER").strip() or "gold"
    cxx = toolchain.cxx_path()
    if not cxx or name in ("default", "ld", "bfd", "0", "off") or name in _failed:
        return []
    return list(_fast(cxx, name))


#: Linkers that failed a link in this process: its later links use the compiler's own.
_failed: set[str] = set()


@functools.cache
def _fast(cxx: str, name: str) -> tuple[str, ...]:
    """``-fuse-ld=name`` if it links a shared library with the C++ runtime (gold with a GCC that has no shared
    libstdc++, as the lent GPU box's ``$CXX``, cannot open the ``libstdc++.so`` it names, and fails here);
    remembered across processes per the compiler, the linker and where the compiler looks for it."""
    def probe() -> bool:  # an empty unit: the driver still links libstdc++ (0.06 s)
        with tempfile.TemporaryDirectory(prefix="jitlab-ld-") as d:
            return subprocess.run([cxx, "-shared", "-fPIC", f"-fuse-ld={name}", "-x", "c++", os.devnull, "-o",
                                   str(Path(d, "probe.so"))], capture_output=True).returncode == 0
    where = [os.environ.get(v, "") for v in ("COMPILER_PATH", "PATH")]
    found = shutil.which(f"ld.{name}", path=os.pathsep.join(filter(None, where))) or ""
    ok = answers.remembered(f"linker {name} for {cxx}", probe,
                            lambda _: [answers.identity(cxx), answers.identity(found), *where])
    return (f"-fuse-ld={name}",) if ok else ()


def run(cmd: list[str], ldflags: list[str] = ()) -> subprocess.CompletedProcess:
    """A link command (``c++ -shared ...``) run with :func:`fast`'s linker; one that fails with it runs again with
    the compiler's own ``ld``, which this process's later links then use (the error, if any, is ``ld``'s)."""
    chosen = fast(ldflags)
    if chosen:
        proc = subprocess.run([cmd[0], *chosen, *cmd[1:]], capture_output=True, text=True)
        if proc.returncode == 0:
            return proc
        name = chosen[0].split("=", 1)[1]
        _failed.add(name)
        again = subprocess.run(cmd, capture_output=True, text=True)
        said = (proc.stdout + proc.stderr).strip().splitlines()
        again.stderr = f"jitlab: {name} failed ({said[0] if said else 'no message'}); linked again with ld\n{again.stderr}"
        return again
    return subprocess.run(cmd, capture_output=True, text=True)


def relocatable(objects: list[Object], folder: Path) -> Path:
    """All objects as one relocatable object (``ld -r``), symbols resolved between them as in a link:
    what a compile-only build keeps and ``jitlab inspect`` reads."""
    inputs, log = linkable(objects, folder)
    out = folder / "objects.o"
    proc = subprocess.run(["ld", "-r", "-o", str(out), *map(str, inputs)], capture_output=True, text=True)
    (folder / "link.log").write_text("\n".join(log) + proc.stderr)
    if proc.returncode != 0:
        raise ToolchainError(f"jitlab: ld -r failed: {proc.stderr.strip()}")
    return out


def linkable(objects: list[Object], folder: Path) -> tuple[list[Path], list[str]]:
    """The objects to link, with what host units need from device units made global.

    nvcc keeps a kernel's host stub file-local when the kernel is a template instantiation, and a
    device variable's host shadow file-local (``static``, so mangled as internal); a host unit refers
    to them by name. Those symbols, and only those, are made global (and given the name the host
    unit uses) in copies of the device objects.

    Returns:
        The object paths, and a log of what was changed.
    """
    wanted = sorted({s for o in objects if o.unit.compiler == "cxx" for s in o.undefined})
    wanted_names = dict(zip(demangle(wanted), wanted))
    inputs, log = [], []
    for o in objects:
        path = o.path
        if o.unit.compiler == "nvcc":
            path = folder / f"{o.unit.name}.o"
            shutil.copyfile(o.path, path)
            local = sorted(local_symbols(path))
            # The same symbol (a template's stub), or the same C++ name under internal-linkage
            # mangling (a variable's shadow: `_ZL6c_bias` for the host unit's `c_bias`).
            renames = {sym: wanted_names[name] for sym, name in zip(local, demangle(local))
                       if sym not in wanted and name in wanted_names}
            globals_ = sorted((set(local) & set(wanted)) | set(renames.values()))
            if globals_:
                cmd = ["objcopy", *(f"--redefine-sym={a}={b}" for a, b in renames.items()),
                       *(f"--globalize-symbol={s}" for s in globals_), str(path)]
                proc = subprocess.run(cmd, capture_output=True, text=True)
                log.append(" ".join(cmd) + "\n" + proc.stderr)
                if proc.returncode != 0:
                    raise ToolchainError(f"jitlab: objcopy failed on {path}: {proc.stderr.strip()} "
                                         "(it comes with binutils, which the host compiler needs too)")
        inputs.append(path)
    return inputs, log
