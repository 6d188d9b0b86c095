"""Linking: a build's cached objects → the importable module, or one relocatable object.

``link`` makes ``<name>.so`` from the objects, defining ``PyInit_<name>`` as the binding object's
module init at link time (``--defsym``, so host objects never depend on the build's name); ``relocatable`` keeps them as one ``ld -r`` object for compile-only builds. Both go through
``linkable``, which makes global, in copies of the device objects, exactly the file-local symbols
nvcc left that the host units refer to by name.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
from pathlib import Path

from jitlab import config
from jitlab.errors import ToolchainError
from jitlab.jit import toolchain
from jitlab.jit.objects import Flags, Object, Unit, UnitError
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
    cmd = [cxx, "-shared", *linker_flags(flags.ld), "-o", str(so), *map(str, inputs), *flags.ld]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    log.append(" ".join(cmd) + "\n" + proc.stdout + proc.stderr)
    (folder / "link.log").write_text("\n".join(log))
    if proc.returncode != 0:
        raise UnitError(Unit(name="link", compiler="cxx", text=""), "\n".join(log))
    return so


#: Linkers tried for the split build's final link, fastest first: each links a module against libtorch in
#: ~0.1 s where GNU ld takes ~0.26 s (2 cores), a tenth of a torch-style edit.
FAST_LINKERS = ("mold", "lld", "gold")


def linker_flags(ldflags=()) -> list[str]:
    """``["-fuse-ld=NAME"]`` for the fastest linker the C++ compiler can use, or ``[]`` for its default.

    ``[]`` too when the build's own ``ldflags`` choose a linker (``-fuse-ld=...``): the user's choice wins.

    ``$JITLAB_LINKER`` names one (``gold``, ``lld``, ``mold``) or ``default`` for the compiler's own; unset,
    the first of :data:`FAST_LINKERS` the compiler finds is used (asked once per process and
    compiler: ``-Wl,--version``, a few milliseconds).
    """
    if any(str(f).startswith("-fuse-ld=") for f in ldflags):
        return []
    return list(_linker_flags(toolchain.cxx_path(), config.getenv("JITLAB_LINKER").strip().lower()))


@functools.cache
def _linker_flags(cxx: str | None, wanted: str) -> tuple[str, ...]:
    if not cxx or wanted in ("default", "bfd", "ld"):
        return ()
    for name in ((wanted,) if wanted else FAST_LINKERS):
        flag = f"-fuse-ld={name}"
        if subprocess.run([cxx, flag, "-Wl,--version"], capture_output=True).returncode == 0:  # runs only the linker
            return (flag,)
    if wanted:
        import warnings

        warnings.warn(f"jitlab: JITLAB_LINKER={wanted!r}: {cxx} cannot link with it; using its default linker "
                      f"(unset JITLAB_LINKER, or name one of {', '.join(FAST_LINKERS)} that is installed)",
                      stacklevel=3)
    return ()


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
