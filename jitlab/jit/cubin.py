"""Running NVRTC's CUBINs: load one into torch's CUDA context and launch its kernels through the
driver API (NVIDIA's cuda-python), with the calling convention of nvcc builds' launch shims.

:mod:`jitlab.jit.engines.nvrtc` compiles; this module is what a loaded build calls on every launch.
"""

from __future__ import annotations

import re

from jitlab.jit import pycode


def load(code: bytes, names: dict[str, str]) -> dict:
    """Load a CUBIN into the current device's primary context (torch's): kernel name → ``cuda.core`` Kernel."""
    from jitlab.jit import cudacore

    core = cudacore.module()
    core.Device().set_current()
    obj = core.ObjectCode.from_cubin(code)
    return {name: obj.get_kernel(symbol) for name, symbol in names.items()}


_INVALID_CONTEXT = 201  # CUDA_ERROR_INVALID_CONTEXT
#: Bytes of dynamic shared memory a kernel may use without opting in (CUDA's 48 KB default).
DEFAULT_DYNAMIC_SMEM = 48 * 1024


def launcher(kernel_of, fn):
    """A launcher for one kernel with the generated shim's convention, for :mod:`jitlab.jit.launch`'s
    typed wrapper: ``(gx, gy, gz, bx, by, bz, shared_mem, stream, a0, a1, ...) -> CUresult``.

    ``kernel_of()`` gives the kernel; it is called at the first launch, so loading a build touches
    neither the driver nor cuda.core (the CUDA context is made by the first launch, as with nvcc's
    builds). The wrapper has checked and converted every argument (pointers as addresses, scalars as
    Python numbers or half bits). Each argument has a C slot made once, and the driver gets the
    array of their addresses (``cuLaunchKernel``'s ``kernelParams``), so a launch stores the values
    and makes one driver call: no per-call argument objects. Like the wrapper, the launcher is
    generated for the kernel's parameters (straight-line stores, no loop or ``*args``). A lock keeps
    threads from filling the slots of one another's launch (the driver copies them during the call).
    """
    import ctypes
    import threading

    from jitlab.errors import LaunchError
    from jitlab.jit import ctypes_map

    slots = [ctypes.c_void_p() if p.pointer else ctypes_map.scalar_kind(p)[0]() for p in fn.params]
    array = (ctypes.c_void_p * max(len(slots), 1))(*[ctypes.addressof(s) for s in slots])
    params = ctypes.addressof(array) if slots else 0

    def fail(e, grid, block, smem):
        code = _error_code(e)
        if code is None:
            raise LaunchError(f"{fn.name}<<<grid={grid}, block={block}, shared_mem={smem}>>> "
                              f"could not be launched: {type(e).__name__}: {e}") from e
        return code

    names = [f"a{i}" for i in range(len(slots))]
    stores = "".join(f"\n                _s{i}.value = a{i}" for i in range(len(slots))) or "\n                pass"
    src = f"""
def make(_bind, _lock, _params, _fail, _current, _opt_in{''.join(f', _s{i}' for i in range(len(slots)))}):
    launch = handle = None
    def call(gx, gy, gz, bx, by, bz, smem, stream{''.join(', ' + a for a in names)}):
        nonlocal launch, handle
        try:
            if handle is None:
                launch, handle = _bind()
            if smem > {DEFAULT_DYNAMIC_SMEM}:  # past 48 KB a kernel must opt in, as CUDA requires
                _opt_in(handle, smem)
            with _lock:{stores}
                err, = launch(handle, gx, gy, gz, bx, by, bz, smem, stream, _params, 0)
                if err == {_INVALID_CONTEXT}:  # a thread where no CUDA call has made the context current
                    _current()
                    err, = launch(handle, gx, gy, gz, bx, by, bz, smem, stream, _params, 0)
        except Exception as e:
            return _fail(e, (gx, gy, gz), (bx, by, bz), smem)
        return err
    return call
"""
    env: dict = {}
    exec(pycode.compiled(src, f"<jitlab launcher {fn.name}>"), env)
    call = env["make"](lambda: _bind(kernel_of), threading.Lock(), params, fail, _make_current,
                       _opt_in_dynamic_smem(), *slots)
    call.keep = (slots, array)  # the slots must live as long as the launcher
    return call




def _bind(kernel_of) -> tuple:
    """``cuLaunchKernel`` and the kernel's driver handle (loading the CUBIN on first use)."""
    from cuda.bindings import driver

    return driver.cuLaunchKernel, kernel_of().handle


def _opt_in_dynamic_smem():
    """``opt_in(handle, smem)``: allow ``smem`` bytes of dynamic shared memory on the current device,
    once per device and size; a size past the GPU's limit is left to the launch to report."""
    done: dict[int, int] = {}

    def opt_in(handle, smem: int) -> None:
        from cuda.bindings import driver

        err, dev = driver.cuCtxGetDevice()
        if smem <= done.get(int(dev), DEFAULT_DYNAMIC_SMEM):
            return
        attr = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        if isinstance(handle, driver.CUkernel):  # cuda.core loads kernels through the library API
            err, = driver.cuKernelSetAttribute(attr, smem, handle, dev)
        else:
            err, = driver.cuFuncSetAttribute(handle, attr, smem)
        if err == driver.CUresult.CUDA_SUCCESS:
            done[int(dev)] = smem
    return opt_in


def _make_current() -> None:
    from jitlab.jit import cudacore

    cudacore.module().Device().set_current()


def _error_code(e: Exception) -> int | None:
    """The CUresult a cuda.core error names (``CUDA_ERROR_INVALID_VALUE: ...``), else ``None``."""
    from cuda.bindings import driver

    m = re.search(r"CUDA_ERROR_\w+", str(e))
    if m and hasattr(driver.CUresult, m.group(0)):
        return int(getattr(driver.CUresult, m.group(0)))
    return None


def error_text(err: int) -> tuple[str, str]:
    """A driver error's name and description (``CUDA_ERROR_INVALID_VALUE``, ``invalid argument``)."""
    from cuda.bindings import driver

    code = driver.CUresult(err)
    name = driver.cuGetErrorName(code)[1]
    text = driver.cuGetErrorString(code)[1]
    return (name.decode() if isinstance(name, bytes) else str(name)), (text.decode() if isinstance(text, bytes) else str(text))
