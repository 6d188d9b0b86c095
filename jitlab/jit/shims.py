"""The ``extern "C"`` shims of a kernel-only unit: what Python calls through ctypes, no torch involved.

After the user's code, each kernel-only translation unit gets error helpers (the last C++ exception's
text; for CUDA, ``cudaGetErrorName``/``cudaGetErrorString``), then one shim per exported function:
``jitlab_launch_K`` launches kernel ``K`` with a grid, block, shared memory size and stream and returns
``cudaGetLastError()`` (with ``jitlab_attributes_K`` reporting its registers and memory), and
``jitlab_call_F`` calls host function ``F``, returns its result through a pointer and turns a C++
exception into -1. Pointers cross as ``void*`` and 16-bit floats as their bits; the prototypes are
public because ``jitlab export``'s torch bindings declare and call the same shims.
"""

from __future__ import annotations

from jitlab.jit import ctypes_map
from jitlab.jit.parse import Function


def shim_unit(fns: list[Function], cuda: bool) -> str:
    """The code generated after the user's code in a kernel-only unit: error helpers, then one shim per function.

    Args:
        fns: The unit's exported kernels and host functions.
        cuda: A CUDA unit (kernels launch, host calls report CUDA errors) or a C++ one.
    """
    shims = [launch_shim(fn) if fn.kind == "global" else call_shim(fn, cuda=cuda) for fn in fns]
    return runtime_helpers(cuda=cuda, prefix="jitlab_" if cuda else "jitlab_cpp_") + "\n".join(shims)


def runtime_helpers(cuda: bool, prefix: str = "jitlab_") -> str:
    """Error reporting shared by the shims: CUDA error strings and the last C++ exception."""
    lines = [
        "static thread_local char jitlab_exception_what[1024];",
        "static void jitlab_remember(const char* what) {",
        "  int i = 0; for (; what && what[i] && i < 1023; ++i) jitlab_exception_what[i] = what[i];",
        "  jitlab_exception_what[i] = 0;",
        "}",
        f'extern "C" const char* {prefix}last_exception() {{ return jitlab_exception_what; }}',
    ]
    if cuda:
        lines += [
            'extern "C" const char* jitlab_error_string(int e) { return cudaGetErrorString((cudaError_t)e); }',
            'extern "C" const char* jitlab_error_name(int e) { return cudaGetErrorName((cudaError_t)e); }',
        ]
    return "\n".join(lines) + "\n"


def shim_params(fn: Function) -> tuple[list[str], list[str]]:
    """Shim parameter declarations and the argument expressions that pass them on.

    Every name a shim declares starts with ``jitlab_``: a kernel or function named ``a``, ``e`` or
    ``stream`` must not be shadowed inside its own shim."""
    decls, args = [], []
    for i, p in enumerate(fn.params):
        name = f"jitlab_arg{i}"
        if p.pointer:
            decls.append(f"void* {name}")
            const = "const " if p.const else ""
            args.append(f"({const}{p.base}*){name}")
        elif p.base in ctypes_map.BITS16_TYPES:
            decls.append(f"unsigned short {name}")
            args.append(f"*reinterpret_cast<const {ctypes_map.BITS16_TYPES[p.base]}*>(&{name})")
        else:
            decls.append(f"{p.base} {name}")
            args.append(name)
    return decls, args


def launch_prototype(fn: Function) -> str:
    """The ``extern "C"`` signature (no semicolon) of a kernel's launch shim: what another unit declares to call it."""
    decls, _ = shim_params(fn)
    head = [f"unsigned jitlab_{v}" for v in ("gx", "gy", "gz", "bx", "by", "bz", "smem")] + ["void* jitlab_stream"]
    return f'extern "C" int jitlab_launch_{fn.name}({", ".join(head + decls)})'


def call_prototype(fn: Function) -> str:
    """The ``extern "C"`` signature (no semicolon) of a host function's call shim; a result comes back through ``jitlab_ret``."""
    decls, _ = shim_params(fn)
    returns = fn.returns.strip()
    if returns != "void":
        decls = [f"{returns}* jitlab_ret"] + decls
    return f'extern "C" int jitlab_call_{fn.name}({", ".join(decls)})'


def launch_shim(fn: Function) -> str:
    """``extern "C"`` launcher for one kernel: grid, block, shared memory, stream, then its arguments."""
    _, args = shim_params(fn)
    return (
        f"{launch_prototype(fn)} {{\n"
        # Past 48 KB of dynamic shared memory a kernel must opt in (CUDA's rule); a size past the
        # GPU's limit fails here and the launch error names the configuration.
        f"  if (jitlab_smem > 48u * 1024u) {{\n"
        f"    cudaError_t jitlab_e = cudaFuncSetAttribute((const void*){fn.qualname}, "
        f"cudaFuncAttributeMaxDynamicSharedMemorySize, (int)jitlab_smem);\n"
        f"    if (jitlab_e != cudaSuccess) {{ (void)cudaGetLastError(); return (int)jitlab_e; }}  // not left pending for torch\n"
        f"  }}\n"
        f"  {fn.qualname}<<<dim3(jitlab_gx, jitlab_gy, jitlab_gz), dim3(jitlab_bx, jitlab_by, jitlab_bz), jitlab_smem, "
        f"(cudaStream_t)jitlab_stream>>>({', '.join(args)});\n"
        f"  return (int)cudaGetLastError();\n"
        f"}}\n"
        f'extern "C" int jitlab_attributes_{fn.name}(int* jitlab_out) {{\n'
        f"  cudaFuncAttributes jitlab_a;\n"
        f"  cudaError_t jitlab_e = cudaFuncGetAttributes(&jitlab_a, (const void*){fn.qualname});\n"
        f"  jitlab_out[0] = jitlab_a.numRegs; jitlab_out[1] = (int)jitlab_a.sharedSizeBytes;\n"
        f"  jitlab_out[2] = (int)jitlab_a.localSizeBytes; jitlab_out[3] = (int)jitlab_a.constSizeBytes;\n"
        f"  jitlab_out[4] = jitlab_a.maxThreadsPerBlock; jitlab_out[5] = jitlab_a.binaryVersion;\n"
        f"  return (int)jitlab_e;\n"
        f"}}\n"
    )


def call_shim(fn: Function, cuda: bool) -> str:
    """``extern "C"`` wrapper for one host function: returns through a pointer, catches C++ exceptions.

    Returns 0 on success, -1 for a C++ exception (message kept for Python), or a CUDA error code.
    """
    _, args = shim_params(fn)
    call = f"{fn.qualname}({', '.join(args)})"
    body = f"*jitlab_ret = {call};" if fn.returns.strip() != "void" else f"{call};"
    after = "return (int)cudaGetLastError();" if cuda else "return 0;"
    return (
        f"{call_prototype(fn)} {{\n"
        f"  try {{ {body} }}\n"
        f"  catch (const std::exception& jitlab_e) {{ jitlab_remember(jitlab_e.what()); return -1; }}\n"
        f'  catch (...) {{ jitlab_remember("unknown C++ exception"); return -1; }}\n'
        f"  {after}\n"
        f"}}\n"
    )
