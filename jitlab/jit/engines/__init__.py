"""The engines: each compiles a plan into a cache entry's folder, one module per way of building.

Every engine is a module with the same four names, which :func:`jitlab.jit.builder.build` (the only
caller) uses after :func:`~jitlab.jit.builder.choose_engine` picked it:

- ``key_parts(plan, archs, opts, parts) -> dict``: the build key, from the plan's parts;
- ``require_tools(plan, opts)``: the tools it needs, checked before a miss takes the key's lock;
- ``make(plan, name, folder, archs, opts) -> Manifest``: compile into ``folder``;
- ``ENGINE`` (what the manifest and ``Build.engine`` record) and ``COMPILER`` (what the progress line names).

The engines: :mod:`.nvrtc` (a kernel-only ``.cu`` in process, to CUBIN), :mod:`.objects` (torch-style
units in the object cache, on :mod:`.pch`'s precompiled headers, linked by :mod:`.linker`, torch's
headers adjusted by :mod:`.torch_headers`), :mod:`.ninja` (a whole snippet through torch's ninja build),
:mod:`.compile_only` (nvcc to an object, no GPU), :mod:`.program` (``int main``: an executable),
:mod:`.nvrtc_torch` and :mod:`.nvrtc_program` (a split's device code through NVRTC, its host side linked
once with :mod:`.slots`) and :mod:`.emulator` (the CPU emulator: the host compiler against the SIMT header in ``simt/``).
Nothing outside :mod:`jitlab.jit` imports them: the stages above call :func:`jitlab.build` or
:func:`jitlab.jit.builder.build`.
"""
