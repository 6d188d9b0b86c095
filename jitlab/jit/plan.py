"""The data that crosses the jit's stages, in one leaf module: what a build compiles and what it records.

``Unit`` (one translation unit to compile) and ``UnitError`` (one that failed), ``Flags`` (one build's flags), ``Object``
(a compiled unit in the object cache), the plans (``Plan``, ``KernelPlan``, ``TorchPlan``, ``ProgramPlan``), ``Operator``
(one a snippet registers with torch's dispatcher), ``Manifest`` (what a cache entry records of its artifact) and
``Build`` (one build in the cache: its plan and manifest). The stages import these from here, never from an engine:
planning a build needs no compiler module. Nothing here imports jitlab.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import ClassVar


#: The name jitlab's generated code is reported at (``jitlab-generated.cpp``, ``.cu``): never a user's file.
GENERATED = "jitlab-generated"


@dataclass(frozen=True)
class Unit:
    """One translation unit to compile.

    Attributes:
        name: Its file name, which says what it is (``square_matrix.device.cu``, ``bind.cpp``).
        compiler: ``"nvcc"`` or ``"cxx"``.
        text: The source, ``#line`` directives included.
        torch: Needs torch's headers: a host unit gets the precompiled header, an nvcc unit (a file
            built as one unit) torch's include folders.
        templates: Kernel templates it defines whose instantiations the host units name.
        module: Holds ``PYBIND11_MODULE(TORCH_EXTENSION_NAME, m)``: the object whose init the module calls.
        headers: The smallest precompiled torch header set (:data:`HEADERS`) to try first (host units).
        source: The user's file it was made from (``""`` for generated code).
        deps: ``(path, SHA-256)`` of each header it includes from the snippet's or user's folders (in its key).
        entries: Ends with the C-ABI entries of the functions it defines (:mod:`jitlab.jit.cabi`).
        own: jitlab's own code (the operator registry): no snippet include folders, one object for all.
    """

    name: str
    compiler: str
    text: str
    torch: bool = False
    templates: frozenset[str] = frozenset()
    module: bool = False
    headers: str = "full"
    source: str = ""
    deps: tuple[tuple[str, str], ...] = ()
    entries: bool = False
    own: bool = False


class UnitError(Exception):
    """A unit failed to compile or link: its unit and the compiler's (or linker's) log."""

    def __init__(self, unit: Unit, log: str):
        super().__init__(unit.name)
        self.unit, self.log = unit, log


@dataclass(frozen=True)
class Bound:
    """How a module block binds one function: ``m.def(name, target, doc)``.

    Attributes:
        name: The Python name.
        doc: The docstring (``""`` when the block gives none).
        torch_errors: Called inside torch's error handling (``torch::wrap_pybind_function``), else pybind11's.
    """

    name: str
    doc: str = ""
    torch_errors: bool = True


@dataclass(frozen=True)
class Flags:
    """The command-line flags of one build (no inputs or outputs).

    Attributes:
        includes: The snippet's own include folders (``-I``), for every unit.
        cxx: Host compiler flags for every host unit and the precompiled header.
        cuda_include: The CUDA toolkit's include folder (``-isystem``), for CUDA snippets' host units.
        cxx_user: The user's host flags and defines (after ``cxx``; a precompiled header set is made with the
            words GCC requires it to share, :func:`jitlab.jit.engines.pch.set_flags`).
        nvcc: nvcc flags for device units.
        nvcc_torch: What an nvcc unit that includes torch's headers adds (their include folders).
        ld: Link flags (libraries, user ldflags).
        toolchain: The toolchain fingerprint (part of every key).
    """

    includes: tuple[str, ...]
    cxx: tuple[str, ...]
    cuda_include: tuple[str, ...]
    cxx_user: tuple[str, ...]
    nvcc: tuple[str, ...]
    nvcc_torch: tuple[str, ...]
    ld: tuple[str, ...]
    toolchain: tuple[tuple[str, str], ...]


@dataclass
class Object:
    """A compiled unit in the object cache.

    Attributes:
        unit: What was compiled.
        path: The object file.
        cached: ``True`` when the object came from the cache.
        seconds: Compile time (0 for a cache hit).
        log: The compiler's output (commands, warnings, resource usage).
        extension: ``TORCH_EXTENSION_NAME`` it was compiled with (host units).
        undefined: Symbols it uses but does not define (mangled), for instantiation and linking.
        headers: The precompiled header set it was compiled with (host units), else ``""``.
        read: The files its compiler read (:mod:`jitlab.jit.deps`), which a build of it checks too;
            ``None`` when one moved while it compiled.
    """

    unit: Unit
    path: Path
    cached: bool
    seconds: float
    log: str
    extension: str = ""
    undefined: list[str] = field(default_factory=list)
    headers: str = ""
    read: list[str] | None = field(default_factory=list)


@dataclass(frozen=True)
class Operator:
    """An operator a snippet defines or implements, as ``repr(module)`` lists it.

    Attributes:
        namespace: ``myops``.
        name: ``scale`` (the overload name, if any, is part of :attr:`schema`).
        schema: ``scale(Tensor x, float a) -> Tensor``; just the name when ``m.def`` infers it, ``""``
            when the snippet only implements an operator defined elsewhere.
        keys: Dispatch keys the snippet gives it kernels for (``CPU``, ``CUDA``), in file order.
        path: Where it is defined (or first implemented).
        line: The line of its ``m.def`` (or ``m.impl``).
    """

    namespace: str
    name: str
    schema: str
    keys: tuple[str, ...] = ()
    path: str = ""
    line: int = 0

    def describe(self) -> str:
        """``myops::scale(Tensor x, float a) -> Tensor [CPU, CUDA]``."""
        what = self.schema if "(" in self.schema else f"{self.name} (schema inferred from its kernel)" \
            if self.schema else f"{self.name} (defined elsewhere)"
        return f"{self.namespace}::{what} [{', '.join(self.keys) or 'no kernel'}]"


@dataclass
class Manifest:
    """What a cache entry records, written as its ``jitlab.json`` by :func:`jitlab.jit.cache.find_or_make`
    once the artifact is complete (an entry without one, or with one that does not parse, is a miss).

    An engine's ``make`` returns one (:func:`jitlab.jit.cache.made` fills the artifact's size and hash);
    fields left ``None`` are not written. ``read`` and ``unstable`` are for ``find_or_make`` alone: it turns
    ``read`` into the entry's dependency record (``deps``), none when ``unstable``.

    Attributes:
        artifact: The artifact's file name in the entry's folder.
        size, sha256: The artifact's size and hash (a hit checks them).
        read: Every file the compiler read.
        unstable: A file it read moved while it compiled: record no dependencies (rebuild next time).
        resources: ptxas's resource usage per kernel and arch.
        compile_only: Compiled without linking or loading.
        notes: One line per choice a user may want to know.
        engine, kind, archs, sources, seconds, built_at: What built it, the snippet's kind, the archs,
            the user's files, the build's seconds and when.
        cubins, kernels, nvrtc: The NVRTC engine's cubin per arch, kernel names and NVRTC version.
        library, module, slots: The torch-style NVRTC engine's module (its path under the cache folder),
            the name it imports as, and its slots (C++ name, name expression, kernel or variable).
        executable: The program NVRTC engine's executable (its path under the cache folder), which the
            build's ``program`` links to.
        units, link_seconds: The object engine's units (name, compiler, cached, seconds, headers) and link time.
        extension, undefined: An object's ``TORCH_EXTENSION_NAME`` and undefined symbols.
        command: A program's compile command.
        stamp, companions: A precompiled header's stamp and its companion files' hashes.
        deps, others, format: Written by the cache (:func:`jitlab.jit.cache.find_or_make`): the files the
            build read with their stamps (``None``: unknown, rebuild next time), its later candidates,
            and jitlab's format version.
    """

    artifact: str
    size: int
    sha256: str
    read: list[str] = field(default_factory=list)
    unstable: bool = False
    resources: dict | None = None
    compile_only: bool | None = None
    notes: list[str] | None = None
    engine: str | None = None
    kind: str | None = None
    archs: list[str] | None = None
    sources: list[str] | None = None
    seconds: float | None = None
    built_at: float | None = None
    cubins: dict[str, str] | None = None
    kernels: dict[str, str] | None = None
    nvrtc: object = None
    library: str | None = None
    module: str | None = None
    slots: list | None = None
    executable: str | None = None
    units: list[dict] | None = None
    link_seconds: float | None = None
    extension: str | None = None
    undefined: list[str] | None = None
    command: list[str] | None = None
    stamp: list | None = None
    companions: dict[str, str] | None = None
    deps: list | None = field(default_factory=list)
    others: list[str] | None = None
    format: int | None = None

    @classmethod
    def from_record(cls, record: dict) -> Manifest:
        """A complete entry's manifest from its JSON record (fields it does not know are left out)."""
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in record.items() if k in known})

    def record(self) -> dict:
        """The entry's JSON record: every field set, and ``deps`` also when ``None`` (unknown: rebuild next
        time), less ``read`` and ``unstable``, which the cache turns into ``deps``."""
        kept = {k: v for k, v in asdict(self).items() if v is not None and k not in ("read", "unstable")}
        return {**kept, "deps": self.deps}


@dataclass(kw_only=True)
class Plan:
    """What to build, the part every kind of plan has (:func:`jitlab.jit.builder.prepare` makes one).

    One class per kind, each with only the fields it uses: :class:`KernelPlan`, :class:`TorchPlan`,
    :class:`ProgramPlan`. ``SourceFile`` and ``Function`` are :mod:`jitlab.jit.parse`'s, named here and
    not imported, so the spine stays a leaf.

    Attributes:
        kind: ``"kernel"``, ``"torch"`` or ``"program"`` (the class's, never set).
        stem: Human part of the module name (the snippet's name).
        cuda: Whether there is CUDA code.
        files: The parsed user files.
        include_dirs: Folders searched for the snippet's local headers.
        notes: One line per choice a user may want to know (a torch-style file built as one unit, and why).
    """

    kind: ClassVar[str] = ""
    stem: str
    cuda: bool
    files: list[SourceFile]
    include_dirs: list[str]
    notes: list[str] = field(default_factory=list)


@dataclass(kw_only=True)
class ModulePlan(Plan):
    """A plan whose build loads as a module of functions Python calls (kernel-only or torch-style).

    Attributes:
        exported: Functions callable from Python.
        skipped: ``(name, reason)`` for functions not exported.
        printing: Python names of the functions that may print (directly or through what they call or
            launch): only these have their C-level output forwarded, so the others time cleanly.
    """

    exported: list[Function]
    skipped: list[tuple[str, str]] = field(default_factory=list)
    printing: set[str] = field(default_factory=set)


@dataclass(kw_only=True)
class KernelPlan(ModulePlan):
    """A kernel-only plan (no torch in the snippet): the user's code and ``extern "C"`` shims, called
    through ctypes (or, for NVRTC, launched from Python). The CPU emulator builds these too.

    Attributes:
        cpp_sources: The C++ unit's texts, in order (prelude, the user's ``.cpp`` files, their shims).
        cuda_sources: The CUDA unit's texts, in order (prelude, the user's ``.cu`` files, their shims).
    """

    kind: ClassVar[str] = "kernel"
    cpp_sources: list[str]
    cuda_sources: list[str]

    @property
    def device_sources(self) -> list[str]:
        """The texts nvcc compiles, for PTX and inspection."""
        return self.cuda_sources

    @property
    def device_needs_torch(self) -> bool:
        """Whether nvcc must see torch's headers: never for a kernel-only plan."""
        return False


@dataclass(kw_only=True)
class TorchPlan(ModulePlan):
    """A torch-style plan: translation units, each compiled to its own cached object and linked into a
    module Python imports (or, for operators, a library ``torch.ops`` calls).

    Attributes:
        units: The translation units (device units for nvcc without torch, host units for the host compiler).
        binds_itself: The snippet makes its own module (``PYBIND11_MODULE``) or registers operators:
            no binding is generated.
        ops: The operators the snippet registers (``TORCH_LIBRARY``): then it is loaded as a plain shared
            library, called through ``torch.ops``, and binds no other function.
        entries: Its functions are called through C-ABI entries (:mod:`jitlab.jit.cabi`): the library is
            loaded with ``ctypes`` and jitlab's binder makes the module, no pybind11 unit.
        bound: C++ name → how the snippet's own module block binds it, when its functions are called through
            entries (:func:`jitlab.jit.binding.module_functions`); a function not in it is bound under its own
            name, its name as its docstring, with torch's error handling (as ``functions=`` binds).
    """

    kind: ClassVar[str] = "torch"
    units: list[Unit]
    binds_itself: bool = False
    ops: list[Operator] = field(default_factory=list)
    entries: bool = False
    bound: dict[str, Bound] = field(default_factory=dict)

    @property
    def device_sources(self) -> list[str]:
        """The texts nvcc compiles (the device units), for PTX and inspection."""
        return [u.text for u in self.units if u.compiler == "nvcc"]

    @property
    def device_needs_torch(self) -> bool:
        """Whether nvcc must see torch's headers (a torch-style file built as one unit)."""
        return any(u.torch for u in self.units if u.compiler == "nvcc")


@dataclass(kw_only=True)
class ProgramPlan(Plan):
    """A whole program (a file defines ``main``): its files compiled as they are, nothing generated."""

    kind: ClassVar[str] = "program"


@dataclass
class Build:
    """One build in the cache: what :func:`jitlab.jit.builder.build` returns (``jitlab.Build``).

    Attributes:
        name: Module name (the snippet's name plus the key).
        folder: The build folder.
        plan: What was generated.
        manifest: The manifest (artifact, hash, timings, resource usage).
        cached: ``True`` when nothing was compiled.
        seconds: Wall time of this build call (0 for a cache hit's compile).
        archs: The archs built for.
    """

    name: str
    folder: Path
    plan: Plan
    manifest: Manifest
    cached: bool
    seconds: float
    archs: list[str]

    @property
    def artifact(self) -> Path:
        return self.folder / self.manifest.artifact

    @property
    def compile_only(self) -> bool:
        return bool(self.manifest.compile_only)

    @property
    def resources(self) -> dict:
        """Per-kernel resource usage from ptxas: registers, shared/local/constant memory, spills."""
        return self.manifest.resources or {}

    @property
    def registers(self) -> str:
        """Each kernel's registers per thread (the most over its archs), one phrase: ``saxpy: 10 registers``."""
        return ", ".join(f"{k}: {max(a['registers'] for a in per.values())} registers"
                         for k, per in sorted(self.resources.items()))

    @property
    def engine(self) -> str:
        """``"nvrtc"`` or ``"nvcc"``: what compiled the CUDA code; ``"c++"`` for a snippet without CUDA."""
        return (self.manifest.engine or "nvcc") if self.plan.cuda else "c++"

    @property
    def notes(self) -> list[str]:
        """One line for each choice the build made that a user may want to know (engine, split, headers)."""
        return list(self.plan.notes if self.manifest.notes is None else self.manifest.notes)

    @property
    def log(self) -> str:
        """The compiler output of the build (warnings and ptxas resource usage)."""
        p = self.folder / "build.log"
        return p.read_text(errors="replace") if p.is_file() else ""
