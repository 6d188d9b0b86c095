"""Typed Python calls into kernel-only builds: tensors for pointers, numbers for scalars.

For each exported function a small Python wrapper is generated (as Triton's launcher is): straight
-line checks of every argument, then one ctypes call into the ``extern "C"`` shim. The common path
costs a few attribute reads per argument; the slow paths (building an error message) live in
ordinary functions below.

What the checks guard, beyond dtype, device and layout: a scalar is a number that fits its C type (an
``int`` given 2**40 or a ``float`` given 1e40 is refused, never masked or made inf); a tensor for a pointer
has memory (an empty tensor's address is NULL) and holds its values (a conjugate or negative view is
refused: ``.resolve_conj()``/``.resolve_neg()``); a grid, block and ``shared_mem`` are within CUDA's
limits; a left-out argument takes its C++ default when that is a plain literal.
Autograd: a tensor written through a non-const pointer has its version counter bumped, as torch's
in-place ops do, so a backward that needs its old values raises torch's "modified by an inplace
operation"; a leaf that requires grad is refused, and any other tensor autograd is recording gets a
backward that raises instead of a silently wrong gradient.
"""

from __future__ import annotations

import ctypes
import keyword

import torch

from jitlab import output
from jitlab.errors import ArgumentError, JitlabError, LaunchError
from jitlab.jit import ctypes_map, messages, pycode
from jitlab.jit.parse import Function, Param

_INT_RANGES = {
    ctypes.c_int8: (-(2**7), 2**7 - 1), ctypes.c_uint8: (0, 2**8 - 1),
    ctypes.c_int16: (-(2**15), 2**15 - 1), ctypes.c_uint16: (0, 2**16 - 1),
    ctypes.c_int32: (-(2**31), 2**31 - 1), ctypes.c_uint32: (0, 2**32 - 1),
    ctypes.c_int64: (-(2**63), 2**63 - 1), ctypes.c_uint64: (0, 2**64 - 1),
}
#: CUDA's launch limits (every GPU since compute capability 3.0): the most blocks per grid axis, the
#: most threads per block axis, threads per block, and dynamic shared memory the shim's ``unsigned`` holds.
DIM_MAX = {"grid": (2**31 - 1, 65535, 65535), "block": (1024, 1024, 64)}
THREADS_MAX = 1024
SHARED_MEM_MAX = 2**32 - 1
#: Grid and block tuples a kernel's wrapper remembers as checked (a size sweep would grow it forever).
CONFIGS_KEPT = 64
#: The last kernel-only launch ``(gx, gy, gz, bx, by, bz, kernel name)``: the checker's thread
#: attribution, and where an isolated run says a fault happened.
last_launch: list = [None]


def _raw_stream_fn():
    fn = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if fn is not None:
        return fn
    return lambda dev: torch.cuda.current_stream(dev).cuda_stream


def _version_bumper():
    """``bump(tensors)``: mark each tensor as modified in place (``torch.autograd.graph.increment_version``).

    Torch's own entry point takes a tuple of tensors in one C call; older releases took one tensor.
    """
    bump = torch._C._increment_version
    try:
        bump((torch.empty(0),))
        return bump
    except TypeError:
        return lambda tensors: [bump(t) for t in tensors]


class _WrittenByKernel(torch.autograd.Function):
    """Records a jitlab call's in-place write on a tensor autograd is tracking: backward through it raises."""

    @staticmethod
    def forward(ctx, tensor, why):
        ctx.why = why
        ctx.mark_dirty(tensor)
        return tensor

    @staticmethod
    def backward(ctx, grad):
        raise RuntimeError(ctx.why)


class _Unevaluated:
    """The Python default of a parameter whose C++ default is not a plain literal: leaving it out is refused."""

    def __init__(self, text: str):
        self.text = text

    def __repr__(self) -> str:
        return self.text


class Callable:
    """One exported function of a kernel-only build; call it like the C function.

    Attributes:
        fn: The parsed signature.
        device: ``"cuda"`` for ``.cu`` snippets, ``"cpu"`` for ``.cpp`` ones and the CPU emulator's builds.
    """

    def __init__(self, fn: Function, lib: ctypes.CDLL | None, device: str, capture_output: bool,
                 exception_symbol: str = "", launcher=None):
        self.fn = fn
        self.device = device
        self._lib = lib
        if lib is not None:
            self._exception = getattr(lib, exception_symbol)
            self._exception.restype = ctypes.c_char_p
        # A kernel of an NVRTC build: a Python launcher with the shim's convention (see cubin.launcher).
        symbol = launcher if launcher is not None else getattr(
            lib, f"jitlab_launch_{fn.name}" if fn.kind == "global" else f"jitlab_call_{fn.name}")
        self._call = _generate(self, fn, symbol, device, native=launcher is None)
        self.capture_output = capture_output
        self.__name__ = fn.name
        self.__doc__ = self.describe()

    def wrap(self, wrapper) -> None:
        """Run every later call through ``wrapper(call)``, the typed call (the CPU emulator names bad addresses so)."""
        self._call = wrapper(self._call)

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
        for p, name in zip(self.fn.params, py_names(self.fn.params)):
            if p.pointer:
                dt = ctypes_map.pointer_dtype(p)
                role = "in" if p.const else "out"
                parts.append(f"{name}: Tensor[{_dtype_name(dt) if dt else 'any'}, {self.device}, {role}]")
            else:
                parts.append(f"{name}: {ctypes_map.scalar_kind(p)[1]}")
            if p.default is not None:
                parts[-1] += f" = {p.default}"
        if self.is_kernel:
            parts.append("*, grid, block, shared_mem=0, stream=None")
        ret = "" if self.fn.returns == "void" else f" -> {self.fn.returns}"
        text = f"{self.fn.name}({', '.join(parts)}){ret}    # {self.fn.signature()}  [{self.fn.path}:{self.fn.line}]"
        if keyword.iskeyword(self.fn.name):
            text += f"\n    (`{self.fn.name}` is a Python keyword: call it as module[{self.fn.name!r}](...))"
        return text

    def __repr__(self) -> str:
        return f"<jitlab {'kernel' if self.is_kernel else 'function'} {self.describe()}>"

    # ---- slow paths, reached only when something is wrong -------------------------------------
    def _arg(self, i: int) -> dict:
        """The fields every argument's message has (see :mod:`.messages`)."""
        p = self.fn.params[i]
        return {"fn": self.fn.name, "i": i + 1, "name": p.name, "ctype": p.ctype}

    def _where(self, i: int) -> str:
        return messages.WHERE.format(**self._arg(i))

    def _left_out(self, i: int, value: _Unevaluated) -> ArgumentError:
        return ArgumentError(f"{self._where(i)} was left out, and its C++ default `{value.text}` is not a plain "
                             f"literal jitlab can pass from Python; pass the argument explicitly")

    def _bad_tensor(self, i: int, value, dev: int | None = None):
        p = self.fn.params[i]
        want = ctypes_map.pointer_dtype(p)
        where, arg = self._where(i), self._arg(i)
        if isinstance(value, _Unevaluated):
            raise self._left_out(i, value)
        if not isinstance(value, torch.Tensor):
            got = "None" if value is None else type(value).__name__
            raise ArgumentError(messages.NOT_A_TENSOR.format(**arg, got=got))
        if value.layout != torch.strided:
            raise ArgumentError(messages.NOT_DENSE.format(**arg, layout=str(value.layout).removeprefix("torch.")))
        if value.is_conj() or value.is_neg():
            raise ArgumentError(messages.LAZY_VIEW.format(**arg, kind="conj" if value.is_conj() else "neg"))
        if want is not None and value.dtype != want:
            raise ArgumentError(messages.DTYPE.format(**arg, want=_dtype_name(want), got=_dtype_name(value.dtype)))
        if self.device == "cuda" and not value.is_cuda:
            raise ArgumentError(messages.NOT_CUDA.format(**arg, device=value.device))
        if self.device == "cpu" and value.device.type != "cpu":
            raise ArgumentError(messages.NOT_CPU.format(**arg, device=value.device))
        if not value.is_contiguous():
            raise ArgumentError(messages.NOT_CONTIGUOUS.format(**arg, strides=tuple(value.stride())))
        if not value.data_ptr():
            raise ArgumentError(messages.EMPTY.format(**arg, shape=tuple(value.shape),
                                                      what="kernel" if self.is_kernel else "function"))
        if dev is not None and value.get_device() != dev:
            raise ArgumentError(messages.OTHER_DEVICE.format(**arg, device=value.device, first=f"cuda:{dev}"))
        cur = torch.cuda.current_device()
        raise ArgumentError(f"{where} is on {value.device} but the current device is cuda:{cur}; "
                            f"call inside `with torch.cuda.device({value.get_device()}):`")

    def _autograd_write(self, i: int, value: torch.Tensor) -> None:
        """A tensor autograd is recording, given to a non-const pointer: refuse a leaf (as torch's in-place
        ops do); for anything else, make a backward through it raise instead of giving a wrong gradient."""
        where, fix = self._where(i), messages.GRAD_FIX
        if value.is_leaf:
            raise ArgumentError(messages.WRITTEN_LEAF.format(**self._arg(i)))
        why = (f"{where} was written in place by this jitlab call while autograd was recording, and autograd "
               f"cannot differentiate a kernel, so the gradient through it would be wrong. If no gradient needs "
               f"to flow through the write, {fix}; otherwise wrap the call in a torch.autograd.Function with "
               f"its own backward")
        try:
            _WrittenByKernel.apply(value, why)
        except RuntimeError as e:  # e.g. a view of a leaf that requires grad
            raise ArgumentError(f"{where}: {str(e).splitlines()[0]} {fix}") from None

    def _scalar(self, i: int, value):
        p = self.fn.params[i]
        ctype, kind = ctypes_map.scalar_kind(p)
        where = self._where(i)
        if isinstance(value, _Unevaluated):
            raise self._left_out(i, value)
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
                raise ArgumentError(messages.INT_RANGE.format(**self._arg(i), lo=lo, hi=hi, value=value))
            return value
        return self._float(i, value, ctype, kind)

    def _float(self, i: int, value, ctype, kind: str):
        """A Python number as a C float, double, __half or __nv_bfloat16 (16-bit kinds as their bits)."""
        where = self._where(i)
        if isinstance(value, (str, bytes)) or not (hasattr(value, "__float__") or hasattr(value, "__index__")):
            hint = "; convert it with `float(...)` first" if isinstance(value, (str, bytes)) else ""
            raise ArgumentError(f"{where} takes a float, got {type(value).__name__} {_short(value)}{hint}")
        c_name = {"half": "__half", "bfloat16": "__nv_bfloat16"}.get(kind)
        c_name = c_name or ("float" if ctype is ctypes.c_float else "double")
        try:
            value = float(value)
            if kind == "half":
                return ctypes_map.half_bits(value)
            if kind == "bfloat16":
                return ctypes_map.bfloat16_bits(value)
            if ctype is ctypes.c_float:
                ctypes_map.float32_bits(value)
            return value
        except OverflowError:
            limit = ctypes_map.FLOAT_MAX.get(c_name)
            most = f" (at most ±{limit:.8g})" if limit else ""
            wider = " or declare the parameter `double`," if limit else ""
            raise ArgumentError(f"{where} got {_short(value)}, too large for a {c_name}{most}: it would become inf; "
                                f"pass a smaller value,{wider} or float('inf') if you mean infinity") from None

    def _config_error(self, what: str, value):
        if value is None:
            raise ArgumentError(messages.NO_CONFIG.format(fn=self.fn.name))
        raise ArgumentError(messages.BAD_DIMS.format(fn=self.fn.name, what=what, value=repr(value)))

    def _dims(self, what: str, value, checked: dict | None = None) -> tuple[int, int, int]:
        """A grid or block as ``(x, y, z)`` within CUDA's limits; a tuple is remembered in ``checked``,
        so the wrapper's next launch with it skips the checks (:data:`CONFIGS_KEPT` at most)."""
        dims = None
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            dims = value, 1, 1
        elif isinstance(value, (tuple, list, torch.Size)) and 1 <= len(value) <= 3 and all(
            isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value
        ):
            v = tuple(value) + (1,) * (3 - len(value))
            dims = v[0], v[1], v[2]
        if dims is None:
            self._config_error(what, value)
        problem = _beyond_limits(what, dims)
        if problem:
            raise ArgumentError(f"{self.fn.name}(): {what}={value!r}: {problem}")
        if checked is not None and type(value) is tuple:
            if len(checked) >= CONFIGS_KEPT:
                checked.clear()
            checked[value] = dims
        return dims

    def _shared_mem(self, value) -> int:
        if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= SHARED_MEM_MAX:
            return value
        raise ArgumentError(messages.SHARED_MEM.format(fn=self.fn.name, value=repr(value)))

    def _error_text(self, err: int) -> tuple[str, str]:
        if self._lib is None:  # a driver error (CUresult) from an NVRTC build's launcher
            from jitlab.jit import cubin

            return cubin.error_text(err)
        return self._lib.jitlab_error_name(err).decode(), self._lib.jitlab_error_string(err).decode()

    def _launch_failed(self, err: int, grid, block, smem):
        name, text = self._error_text(err)
        raise LaunchError(messages.LAUNCH_FAILED.format(fn=self.fn.name, grid=tuple(grid), block=tuple(block),
                                                        shared_mem=smem, error=name, text=text,
                                                        hint=messages.launch_hint(name)))

    def _host_failed(self, err: int):
        if err == -1:
            what = self._exception().decode(errors="replace")
            raise LaunchError(messages.HOST_EXCEPTION.format(fn=self.fn.name, what=what))
        name = self._lib.jitlab_error_name(err).decode()
        text = self._lib.jitlab_error_string(err).decode()
        raise LaunchError(messages.HOST_CUDA_ERROR.format(fn=self.fn.name, error=name, text=text))


def _beyond_limits(what: str, dims: tuple[int, int, int]) -> str:
    """Why a grid or block exceeds CUDA's limits (:data:`DIM_MAX`), with the fix; ``""`` when it fits."""
    for axis, n, most in zip("xyz", dims, DIM_MAX[what]):
        if n > most:
            if what == "block":
                fix = "use more blocks of fewer threads"
            elif axis == "x":
                fix = "launch fewer blocks and let each thread loop over several elements (a grid-stride loop)"
            else:
                fix = "put the long dimension in grid x (up to 2**31 - 1)"
            return f"{what}.{axis} = {n} is more than CUDA allows ({most}); {fix}"
    threads = dims[0] * dims[1] * dims[2]
    if what == "block" and threads > THREADS_MAX:
        return (f"{threads} threads per block ({dims[0]} x {dims[1]} x {dims[2]}), CUDA allows at most "
                f"{THREADS_MAX}; use more blocks of fewer threads")
    return ""


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


_bump_versions = _version_bumper()


def _generate(owner: Callable, fn: Function, symbol, device: str, native: bool = True):
    """Compile the straight-line wrapper for one function (see module docstring).

    ``symbol`` is the ctypes function of the build's shim (``native``), or a Python launcher taking
    the same arguments (an NVRTC build's kernel). Every local of the wrapper starts with ``_``, so no
    parameter name (Python names never start with ``_``, see :func:`py_name`) can shadow one.
    """
    kernel = fn.kind == "global"
    argtypes: list = []
    if kernel:
        argtypes = [ctypes.c_uint] * 7 + [ctypes.c_void_p]
    ret_ctype = None
    if not kernel and fn.returns.strip() != "void":
        ret_ctype = ctypes_map.RETURNS[ctypes_map.strip_qualifiers(fn.returns)]
        argtypes.append(ctypes.POINTER(ret_ctype))
    env = {"_T": torch.Tensor, "_o": owner, "_sym": symbol, "_byref": ctypes.byref,
           "_stream": _raw_stream_fn() if device == "cuda" else lambda dev: None,  # the CPU emulator: no stream
           "_getdev": getattr(torch._C, "_cuda_getDevice", torch.cuda.current_device) if device == "cuda" else int,
           "_ret": ret_ctype, "_last": last_launch, "_type": type, "_isinstance": isinstance, "_getattr": getattr,
           "_grad_on": torch.is_grad_enabled, "_bump": _bump_versions, "_JitlabError": JitlabError}
    names = py_names(fn.params)
    lines = [f"def _jitlab_call({_parameters(owner, fn, names, env)}):"]
    pass_args: list[str] = []
    written: list[tuple[int, str]] = []  # non-const pointers: (index, name)
    for i, p in enumerate(fn.params):
        v = names[i]
        if p.pointer:
            argtypes.append(ctypes.c_void_p)
            lines += _tensor_check(i, p, v, device, env, first=not any(q.pointer for q in fn.params[:i]))
            pass_args.append(f"_a{i}")
            if not p.const:
                written.append((i, v))
        else:
            ctype, kind = ctypes_map.scalar_kind(p)
            argtypes.append(ctype)
            lines.append(_scalar_check(i, v, ctype, kind))
            pass_args.append(v)
    lines += [f"    if {v}.requires_grad and _grad_on(): _o._autograd_write({i}, {v})" for i, v in written]
    if kernel:
        lines += _launch(fn, pass_args, env, has_tensor=any(p.pointer for p in fn.params), device=device)
    else:
        if ret_ctype is not None:
            lines.append("    _out = _ret()")
            pass_args.insert(0, "_byref(_out)")
        lines.append(f"    _err = _sym({', '.join(pass_args)})")
    if written:  # as torch's in-place ops do: a backward that saved these tensors' old values raises
        lines.append(f"    _bump(({''.join(v + ', ' for _, v in written)}))")
    lines.append("    if _err: _o._launch_failed(_err, (_gx, _gy, _gz), (_bx, _by, _bz), shared_mem)" if kernel
                 else "    if _err: _o._host_failed(_err)")
    if ret_ctype is not None:
        lines.append("    return _out.value")
    if native:
        symbol.argtypes = argtypes
        symbol.restype = ctypes.c_int
    # An error is raised from this one frame, not the checking helpers' (IPython hides it too).
    code = pycode.compiled("\n".join([lines[0], "    __tracebackhide__ = True", "    try:", *("    " + ln for ln in lines[1:]),
                                      "    except _JitlabError as _e: raise _e.with_traceback(None) from None"]),
                           f"<jitlab wrapper {fn.name}>")
    exec(code, env)
    call = env["_jitlab_call"]
    call.__name__ = call.__qualname__ = fn.name  # any C name, `lambda` and `None` included
    call.__code__ = call.__code__.replace(co_name=fn.name)  # tracebacks say `in saxpy`
    return call


def _parameters(owner: Callable, fn: Function, names: list[str], env: dict) -> str:
    """The wrapper's parameter list: C defaults as Python defaults (``_d<i>`` in ``env``), then the launch options.

    A default that is a plain literal the C type holds is passed when the argument is left out;
    any other (a macro, an expression, ``nullptr``) makes leaving it out an error naming the parameter.
    """
    parts = []
    for i, (p, name) in enumerate(zip(fn.params, names)):
        if p.default is None:
            parts.append(name)
            continue
        try:
            value = ctypes_map.default_value(p)
            owner._scalar(i, value)  # checked once here, as if passed: `char c = 300` must be passed explicitly
        except (ValueError, ArgumentError):
            value = _Unevaluated(p.default)
        env[f"_d{i}"] = value
        parts.append(f"{name}=_d{i}")
    if fn.kind == "global":
        parts += ["*", "grid=None", "block=None", "shared_mem=0", "stream=None"]
    return ", ".join(parts)


def _tensor_check(i: int, p: Param, v: str, device: str, env: dict, first: bool) -> list[str]:
    """Lines checking tensor argument ``v`` (dtype, device, layout, not empty) and taking its address as ``_a<i>``."""
    dt = ctypes_map.pointer_dtype(p)
    env[f"_dt{i}"] = dt  # lazy views: a conjugate one is complex (only void* takes it), a negative one `.imag`
    conds = [f"_type({v}) is not _T and not _isinstance({v}, _T)", f"{v}.is_conj() or {v}.is_neg()" if dt is None
             else f"{v}.dtype is not _dt{i}" + (f" or {v}.is_neg()" if dt.is_floating_point else "")]
    conds.append(f"not {v}.is_cuda" if device == "cuda" else f"not {v}.is_cpu")
    conds.append(f"not {v}.is_contiguous()")
    lines = [f"    if {' or '.join(conds)}: _o._bad_tensor({i}, {v})"]
    if device == "cuda":
        if first:
            lines.append(f"    _dev = {v}.get_device()")
            lines.append(f"    if _dev != _getdev(): _o._bad_tensor({i}, {v})")
        else:
            lines.append(f"    if {v}.get_device() != _dev: _o._bad_tensor({i}, {v}, _dev)")
    lines.append(f"    _a{i} = {v}.data_ptr()")
    lines.append(f"    if not _a{i}: _o._bad_tensor({i}, {v})")  # an empty tensor: NULL
    return lines


def _scalar_check(i: int, v: str, ctype, kind: str) -> str:
    """The line checking scalar argument ``v``: a fast test for the common case, else :meth:`Callable._scalar`."""
    if kind == "int":
        lo, hi = _INT_RANGES[ctype]
        return f"    if _type({v}) is not int or not {lo} <= {v} <= {hi}: {v} = _o._scalar({i}, {v})"
    if kind == "float" and ctype is ctypes.c_float:  # larger (and inf, nan) take the slow path, which decides
        most = ctypes_map.FLOAT_MAX["float"]
        return f"    if _type({v}) is not float or not {-most!r} <= {v} <= {most!r}: {v} = _o._scalar({i}, {v})"
    if kind == "float":
        return f"    if _type({v}) is not float: {v} = _o._scalar({i}, {v})"
    return f"    {v} = _o._scalar({i}, {v})"


def _launch(fn: Function, pass_args: list[str], env: dict, has_tensor: bool, device: str = "cuda") -> list[str]:
    """The lines of a kernel wrapper after the argument checks: configuration, stream, launch (sets ``_err``).

    An int grid or block is checked inline; a tuple once, then found among the checked ones (a dict
    lookup instead of a few microseconds of type and limit checks per launch).
    """
    env["_grids"], env["_blocks"] = {}, {}
    grid_x, block_x = DIM_MAX["grid"][0], THREADS_MAX
    lines = [
        f"    if _type(grid) is int and 0 < grid <= {grid_x}: _gx, _gy, _gz = grid, 1, 1",
        "    elif _type(grid) is tuple and grid in _grids: _gx, _gy, _gz = _grids[grid]",
        "    else: _gx, _gy, _gz = _o._dims('grid', grid, _grids)",
        f"    if _type(block) is int and 0 < block <= {block_x}: _bx, _by, _bz = block, 1, 1",
        "    elif _type(block) is tuple and block in _blocks: _bx, _by, _bz = _blocks[block]",
        "    else: _bx, _by, _bz = _o._dims('block', block, _blocks)",
        f"    if _type(shared_mem) is not int or not 0 <= shared_mem <= {SHARED_MEM_MAX}:"
        " shared_mem = _o._shared_mem(shared_mem)",
    ]
    if not has_tensor or device == "cpu":  # no tensor argument: launch on the current device
        lines.append("    _dev = _getdev()")
    lines.append("    _s = _stream(_dev) if stream is None else _getattr(stream, 'cuda_stream', stream)")
    lines.append(f"    _last[0] = (_gx, _gy, _gz, _bx, _by, _bz, {fn.name!r})")
    lines.append(f"    _err = _sym(_gx, _gy, _gz, _bx, _by, _bz, shared_mem, _s{''.join(', ' + a for a in pass_args)})")
    return lines


#: Names the wrapper's own keyword arguments take; a C parameter so named gets a trailing ``_``.
_RESERVED = {"grid", "block", "shared_mem", "stream"}


def py_name(p: Param, i: int) -> str:
    """The C parameter's name in Python, so arity errors and keyword arguments use it.

    A Python keyword or a launch option's name gets a trailing ``_`` (``in`` → ``in_``, as PEP 8
    spells it); a name Python cannot take, or one starting with ``_`` (the wrapper's own), is ``p<i>``.
    """
    n = p.name
    if not (n.isascii() and n.isidentifier()) or n.startswith("_"):
        return f"p{i}"
    if keyword.iskeyword(n) or n in _RESERVED:
        return n + "_"
    return n


def py_names(params: tuple[Param, ...]) -> list[str]:
    """:func:`py_name` of each parameter, made unique (``lambda`` and ``lambda_`` both in one signature)."""
    names: list[str] = []
    for i, p in enumerate(params):
        n = py_name(p, i)
        while n in names:
            n += "_"
        names.append(n)
    return names
