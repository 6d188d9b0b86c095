"""Slots: the host side of a torch-style build whose device code NVRTC compiles (:mod:`.nvrtc_torch`).

A split's host unit names each kernel it launches (and each ``__constant__``/``__device__`` variable it
copies to) by its C++ symbol, which nvcc's device object would define as a host stub or shadow. Here no
nvcc object exists: a generated **slot unit** (the host compiler, no torch) defines each of those
symbols as a hidden host function or byte array whose address keys an entry of a slot table
``{address, C++ name, name expression, handle}``. The module is linked with ``--wrap`` for every CUDA
runtime call the host unit makes that takes a kernel or symbol address (``cudaLaunchKernel``,
``cudaFuncSetAttribute``, ``cudaOccupancy…``, ``cudaMemcpyToSymbol`` …): the linker sends the host
unit's calls to the slot unit's ``__wrap_`` function, which swaps a slot's address for its handle (a
``cudaKernel_t``, which CUDA 12+ takes wherever a kernel symbol goes; a variable's device pointer from
``cudaLibraryGetGlobal``) and calls the real runtime (``__real_``). So the host unit's text is the nvcc
split's, byte for byte: its object is shared with that engine and never depends on a kernel body.

``jitlab_slots_load(cubin, lowered names)``, exported, loads a CUBIN (``cudaLibraryLoadData``) and fills
every slot (``cudaLibraryGetKernel``/``cudaLibraryGetGlobal``), all or none; ``jitlab_slots_set`` fills
one slot with given handles (a caller that loads through cuda.bindings, and the CPU tests). A launch
through a slot never filled throws a C++ exception naming the kernel (Python's RuntimeError). A program's
slot unit (:mod:`.nvrtc_program`) defines ``JITLAB_SLOTS_ON_USE``: an empty slot is filled on its first use
from the CUBIN beside the executable, and one that cannot be leaves the runtime call to fail, as nvcc's would.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from jitlab.jit.symbols import demangle


@dataclass(frozen=True)
class Slot:
    """One symbol the host unit names and the device code defines.

    Attributes:
        symbol: The host object's (mangled) symbol, which the slot unit defines.
        name: Its C++ name (``times_kernel<float, 4>``, ``c_bias``), for messages.
        expression: The NVRTC name expression that finds it in the device code (``&c_bias`` for a variable).
        kernel: A kernel (else a ``__constant__``/``__device__`` variable).
    """

    symbol: str
    name: str
    expression: str
    kernel: bool


#: The runtime calls that take a kernel's or a device symbol's address: the argument that does, and the
#: C parameter list (what ``__wrap_`` and ``__real_`` are declared with).
WRAPPED = {
    "cudaLaunchKernel": ("kernel", "const void* a, dim3 g, dim3 b, void** p, size_t s, cudaStream_t st"),
    "cudaLaunchKernel_ptsz": ("kernel", "const void* a, dim3 g, dim3 b, void** p, size_t s, cudaStream_t st"),
    "cudaLaunchCooperativeKernel": ("kernel", "const void* a, dim3 g, dim3 b, void** p, size_t s, cudaStream_t st"),
    "cudaFuncGetAttributes": ("kernel", "cudaFuncAttributes* r, const void* a"),
    "cudaFuncSetAttribute": ("kernel", "const void* a, cudaFuncAttribute k, int v"),
    "cudaFuncGetName": ("kernel", "const char** r, const void* a"),
    "cudaOccupancyMaxActiveBlocksPerMultiprocessor": ("kernel", "int* r, const void* a, int b, size_t s"),
    "cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags": ("kernel", "int* r, const void* a, int b, size_t s, unsigned f"),
    "cudaOccupancyAvailableDynamicSMemPerBlock": ("kernel", "size_t* r, const void* a, int n, int b"),
    "cudaFuncSetCacheConfig": ("cache", "const void* a, cudaFuncCache c"),
    "cudaMemcpyToSymbol": ("to", "const void* a, const void* src, size_t n, size_t o, cudaMemcpyKind k"),
    "cudaMemcpyFromSymbol": ("from", "void* dst, const void* a, size_t n, size_t o, cudaMemcpyKind k"),
    "cudaMemcpyToSymbolAsync": ("to", "const void* a, const void* src, size_t n, size_t o, cudaMemcpyKind k, cudaStream_t st"),
    "cudaMemcpyFromSymbolAsync": ("from", "void* dst, const void* a, size_t n, size_t o, cudaMemcpyKind k, cudaStream_t st"),
    "cudaGetSymbolAddress": ("address", "void** r, const void* a"),
    "cudaGetSymbolSize": ("size", "size_t* r, const void* a"),
}
#: Runtime calls on kernel or symbol addresses that the slots do not translate: a host unit that makes
#: one is built with nvcc (the per-thread default stream's symbol copies, graphs' kernel nodes …).
UNWRAPPED = re.compile(r"^cuda(MemcpyToSymbol|MemcpyFromSymbol|LaunchKernelEx|LaunchCooperativeKernel_|Graph\w*KernelNode"
                       r"|FuncGetParamInfo|OccupancyMaxPotentialCluster|OccupancyMaxActiveClusters|GetFuncBySymbol"
                       r"|GetKernel\b|FuncSetSharedMemConfig)")


class NotSlottable(Exception):
    """The host unit does something the slots cannot serve; the message is the one-line reason."""


_VARIABLE = re.compile(r"\b(?:__constant__|__device__)\b[^;{}()]*?\b([A-Za-z_]\w*)\s*(?:\[[^\]]*\]\s*)*(?:=[^;]*)?;")
_MANAGED = re.compile(r"\b__managed__\b")


def device_variables(device_text: str) -> set[str]:
    """Names of the ``__constant__``/``__device__`` variables a device unit defines (not functions)."""
    text = re.sub(r"//[^\n]*|/\*.*?\*/", " ", device_text, flags=re.S)
    if _MANAGED.search(text):
        raise NotSlottable("a __managed__ variable, which host code reads in place (nvcc's registration)")
    return {m.group(1) for m in _VARIABLE.finditer(text)}


def find(undefined: list[str], kernels: set[str], variables: set[str]) -> tuple[list[Slot], list[str]]:
    """The slots of a host unit and the runtime calls to wrap, from its objects' undefined symbols.

    Args:
        undefined: The host objects' undefined (mangled) symbols.
        kernels: Qualified names of the device unit's kernels and kernel templates.
        variables: Names of its ``__constant__``/``__device__`` variables.

    Raises:
        NotSlottable: A runtime call on a kernel or symbol address the slots do not translate.
    """
    symbols = sorted(set(undefined))
    slots, wrapped = [], []
    for symbol, name in zip(symbols, demangle(symbols)):
        if symbol in WRAPPED:
            wrapped.append(symbol)
            continue
        if UNWRAPPED.match(symbol):
            raise NotSlottable(f"host code calls {symbol}, which the NVRTC engine's slots do not translate")
        head, params = _split_params(name)
        if params is not None:  # a function: `k(float*, int)`, or `void k<float, 4>(float const*, float*, int)`
            qual = head.removeprefix("void ").strip() if "<" in head else head
            if qual.split("<")[0] in kernels and "(anonymous namespace)" not in qual:
                slots.append(Slot(symbol, qual, qual, True))
        elif name in kernels:  # an extern "C" kernel: its symbol is its plain name, and so is its expression
            slots.append(Slot(symbol, name, name, True))
        elif name.split("::")[-1] in variables:
            slots.append(Slot(symbol, name, "&" + name, False))
    return slots, wrapped


def _split_params(name: str) -> tuple[str, str | None]:
    """``void k<a<b>>(int)`` → (``void k<a<b>>``, ``(int)``); a name without a parameter list → (name, None)."""
    depth = 0
    for i, ch in enumerate(name):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0:
            return name[:i], name[i:]
    return name, None


def unsupported_types(slots: list[Slot]) -> str | None:
    """A torch type a template instantiation names that the NVRTC device unit cannot declare (``None``: all can).

    ``c10::Half`` and ``c10::BFloat16`` are declared for device code by ``nvrtc_include/jitlab_c10.h``,
    with c10's arithmetic (in float, rounded on assignment); other torch types are not.
    """
    for s in slots:
        for t in re.findall(r"\b(?:c10|at|torch|caffe2)::[\w:]+", s.expression):
            if t not in ("c10::Half", "c10::BFloat16"):
                return f"kernel {s.name} is instantiated on {t}, which NVRTC's device code cannot declare"
    return None


def link_flags(wrapped: list[str]) -> list[str]:
    """The linker flags that send the host unit's runtime calls to the slot unit's wrappers."""
    return [f"-Wl,--wrap={name}" for name in wrapped]


def unit_text(slots: list[Slot], wrapped: list[str]) -> str:
    """The slot unit's C++ (host compiler, CUDA's runtime header, no torch)."""
    rows = ",\n".join(f'  {{(const void*)&jitlab_slot_{i}, "{_c(s.name)}", "{_c(s.expression)}", {str(s.kernel).lower()}}}'
                      for i, s in enumerate(slots))
    symbols = "".join(_symbol(i, s) for i, s in enumerate(slots))
    wrappers = "".join(_wrapper(name) for name in wrapped)
    return _UNIT.replace("@SYMBOLS@", symbols).replace("@COUNT@", str(max(len(slots), 1))) \
        .replace("@ROWS@", rows or '  {nullptr, "", "", false}').replace("@N@", str(len(slots))).replace("@WRAPPERS@", wrappers)


def _c(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


def _symbol(i: int, s: Slot) -> str:
    if s.kernel:  # never called: a launch passes its address, which the wrappers swap for the kernel
        return (f'extern "C" JITLAB_HIDDEN void jitlab_slot_{i}() __asm__("{s.symbol}");\n'
                f'extern "C" void jitlab_slot_{i}() {{ jitlab_rt::called({i}); }}\n')
    # A variable's host stand-in (nvcc's shadow): its address is the key; host code reading it reads host bytes.
    return f'extern "C" JITLAB_HIDDEN alignas(16) char jitlab_slot_{i}[256] __asm__("{s.symbol}");\nchar jitlab_slot_{i}[256];\n'


def _wrapper(name: str) -> str:
    role, params = WRAPPED[name]
    names = [p.split()[-1].lstrip("*") for p in params.split(",")]
    args = ", ".join(names)
    real = f"__real_{name}"
    body = {
        "kernel": f"return {real}({_swap(names)});",
        "cache": f"return jitlab_rt::find(a) ? cudaSuccess : {real}({args});  // a preference; cudaKernel_t takes none",
        "to": f"size_t size = 0; void* d = jitlab_rt::global(a, &size);\n"
              f"  if (!d) return {real}({args});\n  if (o + n > size) return cudaErrorInvalidValue;\n"
              f"  return {'cudaMemcpyAsync((char*)d + o, src, n, k, st)' if 'st' in names else 'cudaMemcpy((char*)d + o, src, n, k)'};",
        "from": f"size_t size = 0; void* d = jitlab_rt::global(a, &size);\n"
                f"  if (!d) return {real}({args});\n  if (o + n > size) return cudaErrorInvalidValue;\n"
                f"  return {'cudaMemcpyAsync(dst, (char*)d + o, n, k, st)' if 'st' in names else 'cudaMemcpy(dst, (char*)d + o, n, k)'};",
        "address": f"size_t size = 0; void* d = jitlab_rt::global(a, &size);\n  if (!d) return {real}({args});\n"
                   f"  *r = d; return cudaSuccess;",
        "size": f"size_t size = 0; void* d = jitlab_rt::global(a, &size);\n  if (!d) return {real}({args});\n"
                f"  *r = size; return cudaSuccess;",
    }[role]
    return (f'extern "C" __attribute__((visibility("default"))) cudaError_t {real}({params});  // the runtime\n'
            f'extern "C" JITLAB_HIDDEN cudaError_t __wrap_{name}({params}) {{\n  {body}\n}}\n')


def _swap(names: list[str]) -> str:
    """The argument list with the address (``a``) replaced by its kernel."""
    return ", ".join("jitlab_rt::kernel(a)" if n == "a" else n for n in names)


_UNIT = r"""// The slot unit (generated): the kernel and variable symbols the host unit names, and the runtime calls
// it makes on them, translated through the slot table (jitlab/jit/engines/slots.py says why).
#include <cuda_runtime_api.h>
#include <atomic>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <string>
#define JITLAB_HIDDEN __attribute__((visibility("hidden")))
#pragma GCC visibility push(hidden)  // the table and its helpers stay inside the module
#define JITLAB_EXPORT extern "C" __attribute__((visibility("default")))
namespace jitlab_rt {
struct Slot {
  const void* address;     // the host symbol below
  const char* name;        // C++ name, for messages
  const char* expression;  // NVRTC name expression
  bool kernel;
  std::atomic<void*> handle{nullptr};  // cudaKernel_t, or a variable's device pointer
  std::atomic<size_t> size{0};         // a variable's size in bytes
};
[[noreturn]] void called(int i);
void* fill_on_use(Slot* s);  // a program's (JITLAB_SLOTS_ON_USE): its CUBIN loaded on first use, nvrtc_program.py
}  // namespace jitlab_rt
@SYMBOLS@
namespace jitlab_rt {
static Slot slots[@COUNT@] = {
@ROWS@
};
static const int count = @N@;
static std::mutex loading;

Slot* find(const void* address) {
  for (int i = 0; i < count; ++i)
    if (slots[i].address == address) return &slots[i];
  return nullptr;
}

// A slot's handle, or an error naming it (`what`: "kernel", "device variable") while no CUBIN filled it.
void* loaded(Slot* s, const char* what) {
  void* h = s->handle.load(std::memory_order_acquire);
#ifdef JITLAB_SLOTS_ON_USE
  if (h == nullptr) return fill_on_use(s);  // nullptr if it cannot load: the runtime call then fails, as nvcc's would
#endif
  if (h == nullptr)
    throw std::runtime_error(std::string("jitlab: ") + what + " " + s->name + " has no device code loaded: its "
                             "module's CUBIN was not loaded (load the snippet with jitlab.load, which fills its slots)");
  return h;
}

// The kernel a launch or attribute call gets: the slot's cudaKernel_t, or the address as given if it is no slot.
const void* kernel(const void* address) {
  Slot* s = find(address);
  return s == nullptr ? address : loaded(s, "kernel");
}

// A variable's device pointer (and size), or nullptr if the address is no slot.
void* global(const void* address, size_t* size) {
  Slot* s = find(address);
  if (s == nullptr) return nullptr;
  void* d = loaded(s, "device variable");
  *size = s->size.load(std::memory_order_acquire);
  return d;
}

[[noreturn]] void called(int i) {
  std::fprintf(stderr, "jitlab: the host stand-in of kernel %s was called as a function\n", slots[i].name);
  std::abort();
}
}  // namespace jitlab_rt
@WRAPPERS@
JITLAB_EXPORT int jitlab_slots_count() { return jitlab_rt::count; }
JITLAB_EXPORT const char* jitlab_slots_expression(int i) { return i >= 0 && i < jitlab_rt::count ? jitlab_rt::slots[i].expression : nullptr; }
JITLAB_EXPORT const void* jitlab_slots_address(int i) { return i >= 0 && i < jitlab_rt::count ? jitlab_rt::slots[i].address : nullptr; }

// Fill slot i with a kernel handle (cudaKernel_t / CUkernel) or a variable's device pointer and size.
JITLAB_EXPORT int jitlab_slots_set(int i, void* handle, size_t size) {
  if (i < 0 || i >= jitlab_rt::count) return -1;
  jitlab_rt::slots[i].size.store(size, std::memory_order_release);
  jitlab_rt::slots[i].handle.store(handle, std::memory_order_release);
  return 0;
}

// Load a CUBIN and fill every slot from it (lowered[i]: slot i's symbol in it), all or none. The library
// stays loaded: a kernel launched from the one before may still be running.
JITLAB_EXPORT int jitlab_slots_load(const void* image, const char* const* lowered, char* message, size_t room) {
  std::lock_guard<std::mutex> hold(jitlab_rt::loading);
  cudaLibrary_t library = nullptr;
  cudaError_t e = cudaLibraryLoadData(&library, image, nullptr, nullptr, 0, nullptr, nullptr, 0);
  if (e != cudaSuccess) {
    std::snprintf(message, room, "cudaLibraryLoadData: %s", cudaGetErrorString(e));
    return (int)e;
  }
  void* handles[@COUNT@] = {};
  size_t sizes[@COUNT@] = {};
  for (int i = 0; i < jitlab_rt::count; ++i) {
    if (jitlab_rt::slots[i].kernel) {
      cudaKernel_t k = nullptr;
      e = cudaLibraryGetKernel(&k, library, lowered[i]);
      handles[i] = (void*)k;
    } else {
      e = cudaLibraryGetGlobal(&handles[i], &sizes[i], library, lowered[i]);
    }
    if (e != cudaSuccess) {
      std::snprintf(message, room, "%s (%s in the CUBIN): %s", jitlab_rt::slots[i].name, lowered[i], cudaGetErrorString(e));
      cudaLibraryUnload(library);
      return (int)e;
    }
  }
  for (int i = 0; i < jitlab_rt::count; ++i) jitlab_slots_set(i, handles[i], sizes[i]);
  return 0;
}
"""
