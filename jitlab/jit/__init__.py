"""The JIT: a snippet file → a callable module, in order parse → codegen/split → plan → build/cache →
engines → load/launch.

- **parse**: ``parse`` (the data model and the tree-sitter walker), ``macros`` (kernels a macro defines),
  ``preproc`` (which ``#if`` branches this build compiles).
- **codegen/split**: ``codegen`` (the plan of a kernel-only or torch-style snippet), ``shims`` (the
  ``extern "C"`` shims), ``pyargs`` (bindings' argument names), ``split`` and ``module_unit`` (a
  torch-style file as device and host units), ``ops`` (``TORCH_LIBRARY`` blocks), ``header_sets``
  (which precompiled torch header set a unit starts on), ``emulator_support`` (the CPU emulator's
  plan stage: what it refuses), ``ctypes_map`` (C types ↔ Python).
- **plan**: ``plan``, the data spine: a ``Plan`` per kind (``KernelPlan``, ``TorchPlan``,
  ``ProgramPlan``), ``Unit``, ``UnitError``, ``Flags``, ``Object``, ``Operator``, the ``Manifest`` a
  cache entry records and the ``Build``; a leaf that imports nothing of jitlab.
- **build/cache**: ``builder`` (the one entrance: ``prepare`` every kind, ``choose_engine`` with the
  CPU/GPU choice, ``find_or_build``), ``sources`` and ``flags`` (what a build reads, the flags its
  options become), ``shellwords`` (torch's flag lists), ``toolchain``, ``nvcc_shell`` (every nvcc run,
  nothing its own shell would run), ``ninja_tool``, ``cudacore``,
  ``cache`` (``find_or_make``: one find-or-build under a lock), ``cachedir``, ``locks``, ``deps``
  (what a build read), ``cleaning``, ``diagnostics`` and ``resources`` (compiler logs read back),
  ``symbols`` (``nm``).
- **engines**: :mod:`jitlab.jit.engines`, one module per way of building (NVRTC, the object cache,
  ninja, compile-only, program, the CPU emulator), each ``key_parts`` and ``make``; only this package
  imports them.
- **load/launch**: ``loader`` (ctypes or import; the rebuild-once policy), ``launch`` and ``messages``
  (the typed launchers and their checks), ``cubin`` (an NVRTC build's kernels through the driver),
  ``emulator_run`` (running on the CPU emulator), ``oplib`` (operators in the process).
- **front door**: ``api`` (``load``, ``build``, ``clean``) and ``torch_compat`` with ``origins``
  (``jitlab.load_inline`` and ``load``'s torch keywords, errors at the string's line).
"""
