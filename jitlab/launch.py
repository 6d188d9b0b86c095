"""Typed Python calls into kernel-only builds: tensors for pointers, numbers for scalars.

For each exported function a small Python wrapper is generated (as Triton's launcher is): straight
-line checks of every argument, then one ctypes call into the ``extern "C"`` shim. The common path
costs a few attribute reads per argument; the slow paths (building an error message) live in
ordinary functions below.
"""

from __future__ import annotations

import ctypes
import keyword

import torch

from . import ctypes_map, output
from .errors import ArgumentError, LaunchError
from .parse import Function, Param

_INT_RANGES = {
    ctypes.c_int8: (-(2**7), 2**7 - 1), ctypes.c_uint8: (0, 2**8 - 1),
    ctypes.c_int16: (-(2**15), 2**15 - 1), ctypes.c_uint16: (0, 2**16 - 1),
    ctypes.c_int32: (-(2**31), 2**31 - 1), ctypes.c_uint32: (0, 2**32 - 1),
    ctypes.c_int64: (-(2**63), 2**63 - 1), ctypes.c_uint64: (0, 2**64 - 1),
}
#: The last kernel-only launch ``(gx, gy, gz, bx, by, bz, kernel name)``: the checker's thread
#: attribution, and where an isolated run says a fault happened.
last_launch: list = [None]


def _raw_stream_fn():
    fn = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if fn is not None:
        return fn
    return lambda dev: torch.cuda.current_stream(dev).cuda_stream


class Callable:
    """One exported function of a kernel-only build; call it like the C function.

    Attributes:
        fn: The parsed signature.
        device: ``"cuda"`` for ``.cu`` snippets, ``"cpu"`` for ``.cpp`` ones.
    """

    def __init__(self, fn: Function, lib: ctypes.CDLL | None, device: str, capture_output: bool,
                 exception_symbol: str = "", launcher=None):
        self.fn = fn
        self.device = device
        self._lib = lib
        if lib is not None:
            self._exception = getattr(lib, exception_symbol)
            self._exception.restype = ctypes.c_char_p
        # A kernel of an NVRTC build: a Python launcher with the shim's convention (see nvrtc.launcher).
        symbol = launcher if launcher is not None else getattr(
            lib, f"jitlab_launch_{fn.name}" if fn.kind == "global" else f"jitlab_call_{fn.name}")
        self._call = _generate(self, fn, symbol, device, native=launcher is None)
        self.capture_output = capture_output
        self.__name__ = fn.name
        self.__doc__ = self.describe()

    def __call__(self, *args, **kwargs):
        if self.capture_output:
            with output.forward_c_output(sync=self.device == "cuda"):
                return self._call(*args, **kwargs)
        return self._call(*args, **kwargs)

    @property
    def is_kernel(self) -> bool:
        return self.fn.kind == "global"

    def describe(self) -> str:
        """The Python-side signature: what each argument must be."""
        parts = []
        for p in self.fn.params:
            if p.pointer:
                dt = ctypes_map.pointer_dtype(p)
                role = "in" if p.const else "out"
                parts.append(f"{p.name}: Tensor[{str(dt).replace('torch.', '') if dt else 'any'}, {self.device}, {role}]")
            else:
                parts.append(f"{p.name}: {ctypes_map.scalar_kind(p)[1]}")
        if self.is_kernel:
            parts.append("*, grid, block, shared_mem=0, stream=None")
        ret = "" if self.fn.returns == "void" else f" -> {self.fn.returns}"
        return f"{self.fn.name}({', '.join(parts)}){ret}    # {self.fn.signature()}  [{self.fn.path}:{self.fn.line}]"

    def __repr__(self) -> str:
        return f"<jitlab {'kernel' if self.is_kernel else 'function'} {self.describe()}>"

    # ---- slow paths, reached only when something is wrong -------------------------------------
    def _bad_tensor(self, i: int, value, dev: int | None = None):
        p = self.fn.params[i]
        want = ctypes_map.pointer_dtype(p)
        where = f"{self.fn.name}(): argument {i + 1} `{p.name}` ({p.ctype})"
        if not isinstance(value, torch.Tensor):
            raise ArgumentError(f"{where} takes a tensor, got {type(value).__name__}")
        if want is not None and value.dtype != want:
            raise ArgumentError(f"{where} takes a {str(want).replace('torch.', '')} tensor, got {str(value.dtype).replace('torch.', '')}; "
                                f"convert with `.to(torch.{str(want).replace('torch.', '')})`")
        if self.device == "cuda" and not value.is_cuda:
            raise ArgumentError(f"{where} takes a CUDA tensor, got one on {value.device}; move it with `.cuda()`")
        if self.device == "cpu" and value.device.type != "cpu":
            raise ArgumentError(f"{where} takes a CPU tensor (this is a C++ snippet), got one on {value.device}; use `.cpu()`")
        if not value.is_contiguous():
            raise ArgumentError(f"{where} takes a contiguous tensor, got a view with strides {tuple(value.stride())}; "
                                f"pass `.contiguous()` (and copy results back if it is an output)")
        if not p.const and value.requires_grad and value.is_leaf:
            raise ArgumentError(f"{where} is written by the kernel (non-const pointer) but requires grad; "
                                f"pass a tensor without grad, e.g. `.detach()`, or declare it `const` if it is an input")
        if dev is not None and value.get_device() != dev:
            raise ArgumentError(f"{where} is on {value.device} but earlier tensors are on cuda:{dev}: "
                                f"put every tensor on one GPU")
        cur = torch.cuda.current_device()
        raise ArgumentError(f"{where} is on {value.device} but the current device is cuda:{cur}; "
                            f"call inside `with torch.cuda.device({value.get_device()}):`")

    def _scalar(self, i: int, value):
        p = self.fn.params[i]
        ctype, kind = ctypes_map.scalar_kind(p)
        where = f"{self.fn.name}(): argument {i + 1} `{p.name}` ({p.ctype})"
        if isinstance(value, torch.Tensor):
            if value.numel() != 1:
                raise ArgumentError(f"{where} takes a Python number, got a tensor of shape {tuple(value.shape)}")
            value = value.item()
        if kind == "bool":
            if isinstance(value, bool) or (isinstance(value, int) and value in (0, 1)):
                return bool(value)
            raise ArgumentError(f"{where} takes a bool, got {type(value).__name__} {value!r}")
        if kind == "int":
            if isinstance(value, bool) or not isinstance(value, int):
                if hasattr(value, "__index__") and not isinstance(value, bool):
                    value = value.__index__()
                else:
                    raise ArgumentError(f"{where} takes an int, got {type(value).__name__} {value!r}")
            lo, hi = _INT_RANGES[ctype]
            if not lo <= value <= hi:
                raise ArgumentError(f"{where} must be in [{lo}, {hi}], got {value}; use a wider C type (int64_t) in the kernel")
            return value
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            try:
                value = float(value)
            except (TypeError, ValueError):
                raise ArgumentError(f"{where} takes a float, got {type(value).__name__} {value!r}") from None
        if kind == "half":
            return ctypes_map.half_bits(float(value))
        if kind == "bfloat16":
            return ctypes_map.bfloat16_bits(float(value))
        return float(value)

    def _config_error(self, what: str, value):
        if value is None:
            raise ArgumentError(f"{self.fn.name}() is a kernel: pass the launch configuration, e.g. "
                                f"`{self.fn.name}(..., grid=(n + 255) // 256, block=256)`")
        raise ArgumentError(f"{self.fn.name}(): {what}={value!r}: give a positive int or a tuple of 1 to 3 positive ints")

    def _dims(self, what: str, value) -> tuple[int, int, int]:
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value, 1, 1
        if isinstance(value, (tuple, list, torch.Size)) and 1 <= len(value) <= 3 and all(
            isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value
        ):
            v = tuple(value) + (1,) * (3 - len(value))
            return v[0], v[1], v[2]
        self._config_error(what, value)

    def _error_text(self, err: int) -> tuple[str, str]:
        if self._lib is None:  # a driver error (CUresult) from an NVRTC build's launcher
            from .compiler import nvrtc

            return nvrtc.error_text(err)
        return self._lib.jitlab_error_name(err).decode(), self._lib.jitlab_error_string(err).decode()

    def _launch_failed(self, err: int, grid, block, smem):
        name, text = self._error_text(err)
        hint = ""
        if name in ("cudaErrorInvalidConfiguration", "cudaErrorInvalidValue", "CUDA_ERROR_INVALID_VALUE"):
            hint = ("; check the launch configuration: a block has at most 1024 threads (x*y*z), "
                    "grid.y and grid.z at most 65535, shared_mem at most the GPU's limit")
        elif name in ("cudaErrorIllegalAddress", "cudaErrorLaunchFailure", "cudaErrorAssert",
                      "CUDA_ERROR_ILLEGAL_ADDRESS", "CUDA_ERROR_LAUNCH_FAILED", "CUDA_ERROR_ASSERT"):
            hint = "; this error is sticky: the CUDA context is unusable until the process restarts"
        raise LaunchError(f"{self.fn.name}<<<grid={tuple(grid)}, block={tuple(block)}, shared_mem={smem}>>> "
                          f"failed: {name}: {text}{hint}")

    def _host_failed(self, err: int):
        if err == -1:
            raise LaunchError(f"{self.fn.name}() raised a C++ exception: {self._exception().decode(errors='replace')}")
        name = self._lib.jitlab_error_name(err).decode()
        text = self._lib.jitlab_error_string(err).decode()
        raise LaunchError(f"{self.fn.name}() left a CUDA error: {name}: {text}")


def _generate(owner: Callable, fn: Function, symbol, device: str, native: bool = True):
    """Compile the straight-line wrapper for one function (see module docstring).

    ``symbol`` is the ctypes function of the build's shim (``native``), or a Python launcher taking
    the same arguments (an NVRTC build's kernel).
    """
    kernel = fn.kind == "global"
    argtypes: list = []
    if kernel:
        argtypes = [ctypes.c_uint] * 7 + [ctypes.c_void_p]
    ret_ctype = None
    if not kernel and fn.returns.strip() != "void":
        ret_ctype = ctypes_map.RETURNS[ctypes_map._strip(fn.returns)]
        argtypes.append(ctypes.POINTER(ret_ctype))
    env = {"_T": torch.Tensor, "_o": owner, "_sym": symbol, "_stream": _raw_stream_fn(),
           "_getdev": getattr(torch._C, "_cuda_getDevice", torch.cuda.current_device), "_byref": ctypes.byref,
           "_ret": ret_ctype, "_last": last_launch}
    names = [_py_name(p, i) for i, p in enumerate(fn.params)]
    sig = ", ".join(names + (["*", "grid=None", "block=None", "shared_mem=0", "stream=None"] if kernel else []))
    lines = [f"def {fn.name}({sig}):"]
    pass_args: list[str] = []
    first_tensor = True
    for i, p in enumerate(fn.params):
        v = names[i]
        if p.pointer:
            argtypes.append(ctypes.c_void_p)
            dt = ctypes_map.pointer_dtype(p)
            conds = [f"type({v}) is not _T and not isinstance({v}, _T)"]
            if dt is not None:
                env[f"_dt{i}"] = dt
                conds.append(f"{v}.dtype is not _dt{i}")
            conds.append(f"not {v}.is_cuda" if device == "cuda" else f"not {v}.is_cpu")
            conds.append(f"not {v}.is_contiguous()")
            if not p.const:
                conds.append(f"({v}.requires_grad and {v}.is_leaf)")
            lines.append(f"    if {' or '.join(conds)}: _o._bad_tensor({i}, {v})")
            if device == "cuda":
                if first_tensor:
                    lines.append(f"    dev = {v}.get_device()")
                    lines.append(f"    if dev != _getdev(): _o._bad_tensor({i}, {v})")
                    first_tensor = False
                else:
                    lines.append(f"    if {v}.get_device() != dev: _o._bad_tensor({i}, {v}, dev)")
            pass_args.append(f"{v}.data_ptr()")
        else:
            ctype, kind = ctypes_map.scalar_kind(p)
            argtypes.append(ctype)
            if kind == "int":
                lo, hi = _INT_RANGES[ctype]
                lines.append(f"    if type({v}) is not int or not {lo} <= {v} <= {hi}: {v} = _o._scalar({i}, {v})")
            elif kind == "float":
                lines.append(f"    if type({v}) is not float: {v} = _o._scalar({i}, {v})")
            else:
                lines.append(f"    {v} = _o._scalar({i}, {v})")
            pass_args.append(v)
    if kernel:
        lines.append("    if type(grid) is int and grid > 0: gx, gy, gz = grid, 1, 1")
        lines.append("    else: gx, gy, gz = _o._dims('grid', grid)")
        lines.append("    if type(block) is int and block > 0: bx, by, bz = block, 1, 1")
        lines.append("    else: bx, by, bz = _o._dims('block', block)")
        if first_tensor:  # no tensor argument: launch on the current device
            lines.append("    dev = _getdev()")
        lines.append("    s = _stream(dev) if stream is None else getattr(stream, 'cuda_stream', stream)")
        lines.append(f"    _last[0] = (gx, gy, gz, bx, by, bz, {fn.name!r})")
        lines.append(f"    err = _sym(gx, gy, gz, bx, by, bz, shared_mem, s{''.join(', ' + a for a in pass_args)})")
        lines.append("    if err: _o._launch_failed(err, (gx, gy, gz), (bx, by, bz), shared_mem)")
    else:
        if ret_ctype is not None:
            lines.append("    out = _ret()")
            pass_args.insert(0, "_byref(out)")
        lines.append(f"    err = _sym({', '.join(pass_args)})")
        lines.append("    if err: _o._host_failed(err)")
        if ret_ctype is not None:
            lines.append("    return out.value")
    if native:
        symbol.argtypes = argtypes
        symbol.restype = ctypes.c_int
    src = "\n".join(lines)
    code = compile(src, f"<jitlab wrapper {fn.name}>", "exec")
    exec(code, env)
    return env[fn.name]


_RESERVED = {"grid", "block", "shared_mem", "stream", "dev", "s", "err", "out", "gx", "gy", "gz", "bx", "by", "bz"}


def _py_name(p: Param, i: int) -> str:
    """The C parameter's name in the wrapper, so Python's own arity errors name it; ``p<i>`` if unusable."""
    n = p.name
    if n.isidentifier() and not keyword.iskeyword(n) and n not in _RESERVED and not n.startswith("_"):
        return n
    return f"p{i}"
