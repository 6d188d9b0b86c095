// jitlab_simt.h: CUDA's device-side language on the CPU, for jitlab's CPU emulator.
//
// A kernel-only .cu snippet is compiled by the host C++ compiler with this header forced in first
// (-include). It maps CUDA's qualifiers to C++ ones and gives each GPU thread its built-in
// variables, barriers, warp collectives, atomics, math and 16-bit float types. Each GPU thread runs
// as a fiber whose context sits at the base of its own stack (runtime.cpp), so `threadIdx` is two
// instructions: mask the stack pointer, load.
//
// Every collective takes the caller's file and line as hidden default arguments
// (__builtin_FILE/__builtin_LINE, which follow the #line directives jitlab writes), so a
// diagnostic names the user's line, never this header's.
#pragma once

#include <cassert>
#include <climits>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <type_traits>

// ---- qualifiers ------------------------------------------------------------------------------
#define __global__
#define __device__
#define __host__
#define __constant__
#define __managed__
#define __forceinline__ inline __attribute__((always_inline))
// `__noinline__` is not a macro here: libstdc++ spells `__attribute__((__noinline__))`; jitlab rewrites
// the user's `__noinline__` before compiling (emulate.translate).
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
#define __grid_constant__
// One block runs at a time on each OS thread, so a thread_local static is exactly one block's
// shared memory. `extern __shared__ T name[];` is rewritten by jitlab before compiling.
#define __shared__ static thread_local
#define __CUDACC__ 1
#define __NVCC__ 1
#define __CUDA_ARCH__ 800
#define JITLAB_CPU_EMULATOR 1
#define warpSize 32

// ---- vector types ----------------------------------------------------------------------------
struct uint3 { unsigned x, y, z; };
struct dim3 {
    unsigned x, y, z;
    constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
    constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
    constexpr operator uint3() const { return {x, y, z}; }
};

#define JITLAB_VEC2(T, N, A) struct __attribute__((aligned(A))) N { T x, y; };
#define JITLAB_VEC3(T, N) struct N { T x, y, z; };
#define JITLAB_VEC4(T, N, A) struct __attribute__((aligned(A))) N { T x, y, z, w; };
#define JITLAB_VECS(T, P, A2, A4)                                                                  \
    JITLAB_VEC2(T, P##2, A2) JITLAB_VEC3(T, P##3) JITLAB_VEC4(T, P##4, A4)                         \
    inline P##2 make_##P##2(T x, T y) { return {x, y}; }                                           \
    inline P##3 make_##P##3(T x, T y, T z) { return {x, y, z}; }                                   \
    inline P##4 make_##P##4(T x, T y, T z, T w) { return {x, y, z, w}; }
JITLAB_VECS(float, float, 8, 16)
JITLAB_VECS(double, double, 16, 16)
JITLAB_VECS(int, int, 8, 16)
JITLAB_VEC2(unsigned, uint2, 8) JITLAB_VEC4(unsigned, uint4, 16)
inline uint2 make_uint2(unsigned x, unsigned y) { return {x, y}; }
inline uint3 make_uint3(unsigned x, unsigned y, unsigned z) { return {x, y, z}; }
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }
JITLAB_VECS(long long, longlong, 16, 16)
JITLAB_VECS(unsigned long long, ulonglong, 16, 16)
JITLAB_VECS(short, short, 4, 8)
JITLAB_VECS(unsigned short, ushort, 4, 8)
JITLAB_VECS(signed char, char, 2, 4)
JITLAB_VECS(unsigned char, uchar, 2, 4)

namespace jitlab_simt {

// ---- the thread's context (runtime.cpp owns its layout's meaning) -----------------------------
/// One GPU thread's built-in variables, at the base of its fiber's stack.
/// Tensors of a launch whose bounds a plain run tests inline, in the hooks and in a read of a pointer parameter.
constexpr int kFastTensors = 4;
struct ThreadVars {
    uint3 thread_idx, block_idx;
    dim3 block_dim, grid_dim;
    unsigned plain;  // a plain run's thread (no race detector): plain_read
    // The launch's first tensors in a plain run (an access inside one is never reported; spans 0 otherwise).
    uintptr_t tensor_lo[kFastTensors], tensor_span[kFastTensors];
    // The same as in_spans tests them (tensor_spans): a start, and how far past it an 8-byte element may start.
    uintptr_t inline_lo[kFastTensors], inline_room[kFastTensors];
};
/// Fiber stacks are this size and aligned to it, so masking the stack pointer finds the fiber's slot:
/// a guard page, the stack (growing down), then the thread's record near the top. Record and stack
/// start are staggered by the slot's index (64 cache lines), so 256 fibers do not all fall in
/// the same cache sets.
constexpr uintptr_t kStackShift = 18;
constexpr uintptr_t kStackBytes = uintptr_t(1) << kStackShift;
constexpr uintptr_t kRecordOffset = kStackBytes - 8192;
__attribute__((always_inline)) inline uintptr_t colour(uintptr_t slot) { return ((slot >> kStackShift) & 63) * 64; }
__attribute__((always_inline)) inline ThreadVars* self() {
    uintptr_t slot = reinterpret_cast<uintptr_t>(__builtin_frame_address(0)) & ~(kStackBytes - 1);
    return reinterpret_cast<ThreadVars*>(slot + kRecordOffset + colour(slot));
}
/// Whether unhooked_read and unhooked_write move a T in assembly: 1, 2, 4 or 8 bytes, trivially copyable, not volatile
/// (a volatile read goes through its hook, which gives way to a spin-wait's other side); and the word it moves as.
template <class T>
constexpr bool moves_as_word = !std::is_volatile<T>::value && std::is_trivially_copyable<T>::value &&
                               (sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4 || sizeof(T) == 8);
template <class T>
using word_bits = typename std::conditional<sizeof(T) == 1, uint8_t, typename std::conditional<sizeof(T) == 2,
                  uint16_t, typename std::conditional<sizeof(T) == 4, uint32_t, uint64_t>::type>::type>::type;
/// A value loaded in assembly, so that no access hook is called for it: 1, 2, 4 or 8 bytes, trivially copyable and
/// not volatile (anything else is read as written, through the hook: a volatile read gives way to a spin-wait's
/// other side).
template <class T>
__attribute__((always_inline)) inline T unhooked_read(const T& r) {
    if constexpr (!moves_as_word<T>) {
        return r;  // the hook's path, as written
    } else {
        using Bits = word_bits<T>;
        Bits b;
#if defined(__x86_64__)
        if constexpr (sizeof(T) == 1) asm("movzbl %1, %k0" : "=r"(b) : "m"(*reinterpret_cast<const Bits*>(&r)));
        else if constexpr (sizeof(T) == 2) asm("movzwl %1, %k0" : "=r"(b) : "m"(*reinterpret_cast<const Bits*>(&r)));
        else asm("mov %1, %0" : "=r"(b) : "m"(*reinterpret_cast<const Bits*>(&r)));
#else
        if constexpr (sizeof(T) == 1) asm("ldrb %w0, %1" : "=r"(b) : "m"(*reinterpret_cast<const Bits*>(&r)));
        else if constexpr (sizeof(T) == 2) asm("ldrh %w0, %1" : "=r"(b) : "m"(*reinterpret_cast<const Bits*>(&r)));
        else if constexpr (sizeof(T) == 4) asm("ldr %w0, %1" : "=r"(b) : "m"(*reinterpret_cast<const Bits*>(&r)));
        else asm("ldr %0, %1" : "=r"(b) : "m"(*reinterpret_cast<const Bits*>(&r)));
#endif
        return __builtin_bit_cast(T, b);
    }
}
/// `r = v` stored in assembly, so that no access hook is called for it (1, 2, 4 or 8 bytes, trivially copyable, not
/// volatile; anything else is stored as written): a lock-step twin's per-thread slots (jit/engines/lockstep.py).
template <class T>
__attribute__((always_inline)) inline void unhooked_write(T& r, const T& v) {
    if constexpr (!moves_as_word<T>) {
        r = v;
    } else {
        using Bits = word_bits<T>;
        const Bits b = __builtin_bit_cast(Bits, v);
#if defined(__x86_64__)
        if constexpr (sizeof(T) == 1) asm("movb %b1, %0" : "=m"(*reinterpret_cast<Bits*>(&r)) : "r"(b));
        else if constexpr (sizeof(T) == 2) asm("movw %w1, %0" : "=m"(*reinterpret_cast<Bits*>(&r)) : "r"(b));
        else asm("mov %1, %0" : "=m"(*reinterpret_cast<Bits*>(&r)) : "r"(b));
#else
        if constexpr (sizeof(T) == 1) asm("strb %w1, %0" : "=m"(*reinterpret_cast<Bits*>(&r)) : "r"(b));
        else if constexpr (sizeof(T) == 2) asm("strh %w1, %0" : "=m"(*reinterpret_cast<Bits*>(&r)) : "r"(b));
        else if constexpr (sizeof(T) == 4) asm("str %w1, %0" : "=m"(*reinterpret_cast<Bits*>(&r)) : "r"(b));
        else asm("str %1, %0" : "=m"(*reinterpret_cast<Bits*>(&r)) : "r"(b));
#endif
    }
}
/// A built-in variable's value, unhooked (the record is the running thread's own and always readable; the hook
/// would only find it on the thread's stack and return).
__attribute__((always_inline)) inline unsigned unhooked(const unsigned& v) { return unhooked_read(v); }
/// A `__shared__` array's element read in a plain run (no race detector), every index inside its extent: loaded
/// in assembly, so no access hook is called for it. emulator.translated() turns the reads of arrays indexed in full
/// (`tile[ty][k]` on the right of `=`, in arithmetic, an initialiser) into a choice between unhooked_read and the
/// read as written, at the user's line: there -fsanitize=bounds names an index past the extent, and a checked
/// run's hook sees the access. A hook call costs more than the read (no xmm register survives a call, so an
/// accumulator lives in memory): the 512² tiled matmul takes about half as long.
template <class A>
__attribute__((always_inline)) inline bool plain_within(const A&) { return true; }
template <class A, class I, class... More>
__attribute__((always_inline)) inline bool plain_within(const A& a, I i, More... more) {
    return (static_cast<unsigned long long>(i) < std::extent<A>::value) & plain_within(a[0], more...);
}
/// The element `a[i]...` once plain_within held: reached by pointer arithmetic, which -fsanitize=bounds leaves alone
/// (a subscript it would test again).
template <class A>
__attribute__((always_inline)) inline const A& plain_at(const A& a) { return a; }
template <class A, class I, class... More>
__attribute__((always_inline)) inline const auto& plain_at(const A& a, I i, More... more) {
    return plain_at(*(a + i), more...);
}
/// `a[i]... = v` once plain_within held (a plain run's store to a `__shared__` array, emulator.translated()): stored in
/// assembly, as the element's type.
template <class A, class V, class... I>
__attribute__((always_inline)) inline void plain_store(A& a, const V& v, I... i) {
    using E = std::remove_cv_t<std::remove_all_extents_t<A>>;
    unhooked_write(const_cast<E&>(plain_at(a, i...)), static_cast<E>(v));
}
template <class A, class... I>
__attribute__((always_inline)) inline bool plain_read(const A& a, I... i) {
    // no branch per test: one, expected taken, so GCC lays the hooked read out as the cold path
    return __builtin_expect((unhooked(self()->plain) != 0) & plain_within(a, i...), 1);
}
/// A plain run's first tensors as in_spans tests them (ThreadVars::inline_lo and _room, set with the tensors): each
/// start, and how far past it an 8-byte element may start (a tensor under 8 bytes, or an unused entry: start 0,
/// room 0, which no pointer passes). Scalars, not arrays, so that they live in registers (an array on the stack
/// would be read through the access hooks). A lock-step twin reads them once; in_tensor at each read.
struct Spans {
    uintptr_t lo0, room0, lo1, room1, lo2, room2, lo3, room3;
};
__attribute__((always_inline)) inline Spans tensor_spans() {
    const ThreadVars* v = self();
    static_assert(kFastTensors == 4, "one pair of fields a tensor");
#define JITLAB_SPAN(k) const uintptr_t lo##k = unhooked_read(v->inline_lo[k]), room##k = unhooked_read(v->inline_room[k])
    JITLAB_SPAN(0);
    JITLAB_SPAN(1);
    JITLAB_SPAN(2);
    JITLAB_SPAN(3);
#undef JITLAB_SPAN
    return {lo0, room0, lo1, room1, lo2, room2, lo3, room3};
}
/// Whether `*p` lies whole inside one of `s`'s tensors (an element of at most 8 bytes; a larger one: no): read
/// through a pointer parameter, it is then taken unhooked (emulator.translated()); otherwise the read as written
/// runs, through the hook. One subtraction and one comparison a tensor, no branch; an element narrower than 8 bytes
/// in a tensor's last 7 takes the hook.
template <class T>
__attribute__((always_inline)) inline bool in_spans(const Spans& s, const T* p) {
    if constexpr (sizeof(T) > 8) {
        return false;
    } else {
        const uintptr_t a = reinterpret_cast<uintptr_t>(p);
        const bool in = (a - s.lo0 <= s.room0 + (8 - sizeof(T))) | (a - s.lo1 <= s.room1 + (8 - sizeof(T))) |
                        (a - s.lo2 <= s.room2 + (8 - sizeof(T))) | (a - s.lo3 <= s.room3 + (8 - sizeof(T)));
        return __builtin_expect(in, 1);
    }
}
template <class T>
__attribute__((always_inline)) inline bool in_tensor(const T* p) { return in_spans(tensor_spans(), p); }

/// The launch shims' lambdas: they read the kernel's arguments from the launching thread's frame, which no fast
/// path of the access hooks knows, so each read took the slow one (four arguments: ~100 ns of a vector add's
/// ~140 ns a thread). Unhooked, they only pass the arguments on; GCC never inlines the kernel into them (the
/// sanitizer attributes differ), so the kernel's own accesses stay checked.
#define JITLAB_UNHOOKED __attribute__((no_sanitize_thread))
__attribute__((always_inline)) inline uint3 builtin(const uint3& v) { return {unhooked(v.x), unhooked(v.y), unhooked(v.z)}; }
__attribute__((always_inline)) inline dim3 builtin(const dim3& v) { return dim3(unhooked(v.x), unhooked(v.y), unhooked(v.z)); }

// ---- lock-step twins (jit/engines/lockstep.py) ------------------------------------------------
// A twin runs a block's threads one after the other through each stretch of its kernel between two barriers, in
// one fiber; each thread's variables that outlive a stretch sit in a slot array on that fiber's stack.
template <class T>
using type_t = T;  // a slot's type, whatever its declarator spelled (`type_t<const float*>`, `type_t<float[4]>`)
constexpr size_t kStepsBytes = size_t(128) << 10;  // a twin's slots at most (the fiber's stack is 248 KiB): else fibers
/// The block's thread count, the length of a twin's thread loops.
__attribute__((always_inline)) inline unsigned steps_threads() {
    const ThreadVars* v = self();
    return unhooked(v->block_dim.x) * unhooked(v->block_dim.y) * unhooked(v->block_dim.z);
}
/// The fiber's record says it is thread `t` of the block (t counts up from 0 in each thread loop: threadIdx steps).
__attribute__((always_inline)) inline void step(unsigned t) {
    ThreadVars* v = self();
    unsigned x = 0, y = 0, z = 0;
    if (t != 0) {
        x = unhooked(v->thread_idx.x) + 1, y = unhooked(v->thread_idx.y), z = unhooked(v->thread_idx.z);
        if (x == unhooked(v->block_dim.x)) {
            x = 0;
            if (++y == unhooked(v->block_dim.y)) y = 0, ++z;
        }
    }
    unhooked_write(v->thread_idx.x, x), unhooked_write(v->thread_idx.y, y), unhooked_write(v->thread_idx.z, z);
}
/// Threads `first` and `other` (linear indices) disagree on the condition of a loop or `if` at file:line holding the
/// barrier at file:barrier_line (`again`: whether `first` goes on): the barrier divergence the fibers would report.
/// Never returns.
[[noreturn]] void steps_parted(unsigned first, unsigned other, int again, const char* what, const char* file, int line,
                               int barrier_line);
/// `reached` threads reach the barrier at file:line and thread `gone` returned before it. Never returns.
[[noreturn]] void steps_returned(unsigned reached, unsigned gone, const char* file, int line);

// ---- the runtime's entry points (runtime.cpp) --------------------------------------------------
enum class WarpOp : int { Sync, Idx, Up, Down, Xor, Ballot, Any, All, Activemask, Add, Min, Max, And, Or, Xor_,
                           MatchAny, MatchAll };
enum class BarrierOp : int { Sync, Count, And, Or };
int barrier(BarrierOp op, int predicate, const char* file, int line);
uint64_t warp(WarpOp op, unsigned mask, uint64_t value, int arg, int width, const char* file, int line);
void* dynamic_shared();
[[noreturn]] void trap(const char* what, const char* file, int line);

}  // namespace jitlab_simt


#define threadIdx (::jitlab_simt::builtin(::jitlab_simt::self()->thread_idx))
#define blockIdx (::jitlab_simt::builtin(::jitlab_simt::self()->block_idx))
#define blockDim (::jitlab_simt::builtin(::jitlab_simt::self()->block_dim))
#define gridDim (::jitlab_simt::builtin(::jitlab_simt::self()->grid_dim))

// ---- barriers ----------------------------------------------------------------------------------
#define JITLAB_WHERE const char* jitlab_file = __builtin_FILE(), int jitlab_line = __builtin_LINE()
inline void __syncthreads(JITLAB_WHERE) {
    jitlab_simt::barrier(jitlab_simt::BarrierOp::Sync, 0, jitlab_file, jitlab_line);
}
inline int __syncthreads_count(int p, JITLAB_WHERE) {
    return jitlab_simt::barrier(jitlab_simt::BarrierOp::Count, p != 0, jitlab_file, jitlab_line);
}
inline int __syncthreads_and(int p, JITLAB_WHERE) {
    return jitlab_simt::barrier(jitlab_simt::BarrierOp::And, p != 0, jitlab_file, jitlab_line);
}
inline int __syncthreads_or(int p, JITLAB_WHERE) {
    return jitlab_simt::barrier(jitlab_simt::BarrierOp::Or, p != 0, jitlab_file, jitlab_line);
}
inline void __trap(JITLAB_WHERE) { jitlab_simt::trap("__trap() called", jitlab_file, jitlab_line); }
inline void __brkpt(JITLAB_WHERE) { jitlab_simt::trap("__brkpt() called", jitlab_file, jitlab_line); }
inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_block() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_system() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __nanosleep(unsigned) {}
inline long long clock64() {  // the CPU's cycle (x86_64) or virtual timer (aarch64) counter
#if defined(__x86_64__)
    return (long long)__builtin_ia32_rdtsc();
#else
    long long v;
    asm volatile("mrs %0, cntvct_el0" : "=r"(v));
    return v;
#endif
}

// ---- warp collectives --------------------------------------------------------------------------
namespace jitlab_simt {
template <class T>
inline uint64_t bits_of(T v) {
    static_assert(sizeof(T) <= 8, "warp shuffles move at most 8 bytes, as on the GPU");
    uint64_t b = 0;
    std::memcpy(&b, &v, sizeof(T));
    return b;
}
template <class T>
inline T from_bits(uint64_t b) {
    T v;
    std::memcpy(&v, &b, sizeof(T));
    return v;
}
template <class T>
inline T shuffle(WarpOp op, unsigned mask, T v, int arg, int width, const char* f, int l) {
    return from_bits<T>(warp(op, mask, bits_of(v), arg, width, f, l));
}
}  // namespace jitlab_simt

template <class T>
inline T __shfl_sync(unsigned mask, T v, int src, int width = warpSize, JITLAB_WHERE) {
    return jitlab_simt::shuffle(jitlab_simt::WarpOp::Idx, mask, v, src, width, jitlab_file, jitlab_line);
}
template <class T>
inline T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = warpSize, JITLAB_WHERE) {
    return jitlab_simt::shuffle(jitlab_simt::WarpOp::Up, mask, v, (int)delta, width, jitlab_file, jitlab_line);
}
template <class T>
inline T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = warpSize, JITLAB_WHERE) {
    return jitlab_simt::shuffle(jitlab_simt::WarpOp::Down, mask, v, (int)delta, width, jitlab_file, jitlab_line);
}
template <class T>
inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = warpSize, JITLAB_WHERE) {
    return jitlab_simt::shuffle(jitlab_simt::WarpOp::Xor, mask, v, lane_mask, width, jitlab_file, jitlab_line);
}
inline unsigned __ballot_sync(unsigned mask, int p, JITLAB_WHERE) {
    return (unsigned)jitlab_simt::warp(jitlab_simt::WarpOp::Ballot, mask, p != 0, 0, 32, jitlab_file, jitlab_line);
}
inline int __any_sync(unsigned mask, int p, JITLAB_WHERE) {
    return (int)jitlab_simt::warp(jitlab_simt::WarpOp::Any, mask, p != 0, 0, 32, jitlab_file, jitlab_line);
}
inline int __all_sync(unsigned mask, int p, JITLAB_WHERE) {
    return (int)jitlab_simt::warp(jitlab_simt::WarpOp::All, mask, p != 0, 0, 32, jitlab_file, jitlab_line);
}
inline void __syncwarp(unsigned mask = 0xffffffffu, JITLAB_WHERE) {
    jitlab_simt::warp(jitlab_simt::WarpOp::Sync, mask, 0, 0, 32, jitlab_file, jitlab_line);
}
inline unsigned __activemask(JITLAB_WHERE) {
    return (unsigned)jitlab_simt::warp(jitlab_simt::WarpOp::Activemask, 0, 0, 0, 32, jitlab_file, jitlab_line);
}
#define JITLAB_REDUCE(NAME, OP)                                                                      \
    inline unsigned NAME(unsigned mask, unsigned v, JITLAB_WHERE) {                                  \
        return (unsigned)jitlab_simt::warp(jitlab_simt::WarpOp::OP, mask, v, 0, 32, jitlab_file, jitlab_line); \
    }
JITLAB_REDUCE(__reduce_add_sync, Add)
JITLAB_REDUCE(__reduce_and_sync, And)
JITLAB_REDUCE(__reduce_or_sync, Or)
JITLAB_REDUCE(__reduce_xor_sync, Xor_)
inline int __reduce_min_sync(unsigned mask, int v, JITLAB_WHERE) {
    return (int)jitlab_simt::warp(jitlab_simt::WarpOp::Min, mask, (uint64_t)(int64_t)v, 0, 32, jitlab_file, jitlab_line);
}
inline int __reduce_max_sync(unsigned mask, int v, JITLAB_WHERE) {
    return (int)jitlab_simt::warp(jitlab_simt::WarpOp::Max, mask, (uint64_t)(int64_t)v, 0, 32, jitlab_file, jitlab_line);
}
// unsigned: zero-extended, so the 64-bit signed min/max the runtime takes is the unsigned one
inline unsigned __reduce_min_sync(unsigned mask, unsigned v, JITLAB_WHERE) {
    return (unsigned)jitlab_simt::warp(jitlab_simt::WarpOp::Min, mask, (uint64_t)v, 0, 32, jitlab_file, jitlab_line);
}
inline unsigned __reduce_max_sync(unsigned mask, unsigned v, JITLAB_WHERE) {
    return (unsigned)jitlab_simt::warp(jitlab_simt::WarpOp::Max, mask, (uint64_t)v, 0, 32, jitlab_file, jitlab_line);
}
template <class T>
inline unsigned __match_any_sync(unsigned mask, T v, JITLAB_WHERE) {
    return (unsigned)jitlab_simt::warp(jitlab_simt::WarpOp::MatchAny, mask, jitlab_simt::bits_of(v), 0, 32, jitlab_file,
                                       jitlab_line);
}
template <class T>
inline unsigned __match_all_sync(unsigned mask, T v, int* pred, JITLAB_WHERE) {
    unsigned m = (unsigned)jitlab_simt::warp(jitlab_simt::WarpOp::MatchAll, mask, jitlab_simt::bits_of(v), 0, 32,
                                             jitlab_file, jitlab_line);
    *pred = m != 0;
    return m;
}
inline unsigned __lanemask_lt() {
    unsigned lane = (threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) & 31u;
    return (1u << lane) - 1u;
}

// ---- atomics: real ones (blocks run on several OS threads), relaxed as the GPU's -----------------
namespace jitlab_simt {
template <class T, class F>
inline T atomic_update(T* p, F f) {  // compare-and-swap on the bits: floats and the rules CUDA defines
    using Bits = std::conditional_t<sizeof(T) == 2, uint16_t, std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>>;
    static_assert(sizeof(T) == sizeof(Bits), "atomics take 2-, 4- or 8-byte values");
    Bits* b = reinterpret_cast<Bits*>(p);
    Bits old = __atomic_load_n(b, __ATOMIC_RELAXED);
    for (;;) {
        T was = from_bits<T>(old);
        T now = f(was);
        Bits next = (Bits)bits_of(now);
        if (__atomic_compare_exchange_n(b, &old, next, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) return was;
    }
}
}  // namespace jitlab_simt

template <class T, class U>
inline T atomicAdd(T* p, U v) {
    if constexpr (std::is_integral_v<T>) {
        return __atomic_fetch_add(p, (T)v, __ATOMIC_RELAXED);
    } else {
        return jitlab_simt::atomic_update(p, [&](T a) { return T(a + T(v)); });
    }
}
template <class T, class U>
inline T atomicSub(T* p, U v) { return __atomic_fetch_sub(p, (T)v, __ATOMIC_RELAXED); }
template <class T, class U>
inline T atomicExch(T* p, U v) {
    if constexpr (std::is_integral_v<T>) return __atomic_exchange_n(p, (T)v, __ATOMIC_RELAXED);
    else return jitlab_simt::atomic_update(p, [&](T) { return T(v); });
}
template <class T, class U>
inline T atomicMin(T* p, U v) { return jitlab_simt::atomic_update(p, [&](T a) { return T(v) < a ? T(v) : a; }); }
template <class T, class U>
inline T atomicMax(T* p, U v) { return jitlab_simt::atomic_update(p, [&](T a) { return a < T(v) ? T(v) : a; }); }
template <class T, class U>
inline T atomicAnd(T* p, U v) { return __atomic_fetch_and(p, (T)v, __ATOMIC_RELAXED); }
template <class T, class U>
inline T atomicOr(T* p, U v) { return __atomic_fetch_or(p, (T)v, __ATOMIC_RELAXED); }
template <class T, class U>
inline T atomicXor(T* p, U v) { return __atomic_fetch_xor(p, (T)v, __ATOMIC_RELAXED); }
inline unsigned atomicInc(unsigned* p, unsigned v) {
    return jitlab_simt::atomic_update(p, [&](unsigned a) { return a >= v ? 0u : a + 1u; });
}
inline unsigned atomicDec(unsigned* p, unsigned v) {
    return jitlab_simt::atomic_update(p, [&](unsigned a) { return (a == 0 || a > v) ? v : a - 1u; });
}
template <class T, class U, class V>
inline T atomicCAS(T* p, U compare, V v) {
    T expected = (T)compare;
    __atomic_compare_exchange_n(p, &expected, (T)v, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
    return expected;
}
#define JITLAB_SCOPED(NAME)                                                                          \
    template <class T, class... A>                                                                   \
    inline T NAME##_block(T* p, A... a) { return NAME(p, a...); }                                    \
    template <class T, class... A>                                                                   \
    inline T NAME##_system(T* p, A... a) { return NAME(p, a...); }
JITLAB_SCOPED(atomicAdd) JITLAB_SCOPED(atomicSub) JITLAB_SCOPED(atomicExch) JITLAB_SCOPED(atomicMin)
JITLAB_SCOPED(atomicMax) JITLAB_SCOPED(atomicAnd) JITLAB_SCOPED(atomicOr) JITLAB_SCOPED(atomicXor)
JITLAB_SCOPED(atomicCAS)

// ---- memory loads, bit tricks, integer intrinsics ---------------------------------------------------
template <class T> inline T __ldg(const T* p) { return *p; }
template <class T> inline T __ldcg(const T* p) { return *p; }
template <class T> inline T __ldca(const T* p) { return *p; }
template <class T> inline T __ldcs(const T* p) { return *p; }
template <class T> inline T __ldlu(const T* p) { return *p; }
template <class T> inline void __stcg(T* p, T v) { *p = v; }
template <class T> inline void __stcs(T* p, T v) { *p = v; }
template <class T> inline void __stwt(T* p, T v) { *p = v; }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x ? __builtin_clz((unsigned)x) : 32; }
inline int __clzll(long long x) { return x ? __builtin_clzll((unsigned long long)x) : 64; }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline unsigned __brev(unsigned x) {
    x = ((x >> 1) & 0x55555555u) | ((x & 0x55555555u) << 1);
    x = ((x >> 2) & 0x33333333u) | ((x & 0x33333333u) << 2);
    x = ((x >> 4) & 0x0f0f0f0fu) | ((x & 0x0f0f0f0fu) << 4);
    return __builtin_bswap32(x);
}
inline int __mul24(int a, int b) { return (int)((int64_t)((a << 8) >> 8) * ((b << 8) >> 8)); }
inline unsigned __umul24(unsigned a, unsigned b) { return (a & 0xffffffu) * (b & 0xffffffu); }
inline int __mulhi(int a, int b) { return (int)(((int64_t)a * b) >> 32); }
inline unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)(((uint64_t)a * b) >> 32); }
inline long long __mul64hi(long long a, long long b) { return (long long)(((__int128)a * b) >> 64); }
inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) {
    return (unsigned long long)(((unsigned __int128)a * b) >> 64);
}
inline unsigned __sad(int a, int b, unsigned c) { return c + (unsigned)(a > b ? a - b : b - a); }
inline unsigned __funnelshift_l(unsigned lo, unsigned hi, unsigned s) {
    return (unsigned)((((uint64_t)hi << 32) | lo) << (s & 31) >> 32);
}
inline unsigned __funnelshift_r(unsigned lo, unsigned hi, unsigned s) {
    return (unsigned)((((uint64_t)hi << 32) | lo) >> (s & 31));
}
inline int __float_as_int(float x) { return jitlab_simt::from_bits<int>(jitlab_simt::bits_of(x)); }
inline unsigned __float_as_uint(float x) { return jitlab_simt::from_bits<unsigned>(jitlab_simt::bits_of(x)); }
inline float __int_as_float(int x) { return jitlab_simt::from_bits<float>(jitlab_simt::bits_of(x)); }
inline float __uint_as_float(unsigned x) { return jitlab_simt::from_bits<float>(jitlab_simt::bits_of(x)); }
inline long long __double_as_longlong(double x) { return jitlab_simt::from_bits<long long>(jitlab_simt::bits_of(x)); }
inline double __longlong_as_double(long long x) { return jitlab_simt::from_bits<double>(jitlab_simt::bits_of(x)); }

// ---- math: CUDA's names over the C library (the fast intrinsics are the accurate functions here) ----
inline int max(int a, int b) { return a > b ? a : b; }
inline int min(int a, int b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline float max(float a, float b) { return fmaxf(a, b); }
inline float min(float a, float b) { return fminf(a, b); }
inline double max(double a, double b) { return fmax(a, b); }
inline double min(double a, double b) { return fmin(a, b); }
inline unsigned max(int a, unsigned b) { return max((unsigned)a, b); }
inline unsigned max(unsigned a, int b) { return max(a, (unsigned)b); }
inline unsigned min(int a, unsigned b) { return min((unsigned)a, b); }
inline unsigned min(unsigned a, int b) { return min(a, (unsigned)b); }
inline double max(float a, double b) { return fmax(a, b); }
inline double max(double a, float b) { return fmax(a, b); }
inline double min(float a, double b) { return fmin(a, b); }
inline double min(double a, float b) { return fmin(a, b); }
inline long max(long a, long b) { return a > b ? a : b; }
inline long min(long a, long b) { return a < b ? a : b; }
inline unsigned long max(unsigned long a, unsigned long b) { return a > b ? a : b; }
inline unsigned long min(unsigned long a, unsigned long b) { return a < b ? a : b; }
inline unsigned long long max(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
inline unsigned long long min(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
inline long long llmax(long long a, long long b) { return a > b ? a : b; }
inline long long llmin(long long a, long long b) { return a < b ? a : b; }
inline unsigned long long ullmax(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
inline unsigned long long ullmin(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
// nvcc's math headers put the classification functions in the global namespace too
using std::isnan;
using std::isinf;
using std::isfinite;
using std::signbit;
inline unsigned umin(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned umax(unsigned a, unsigned b) { return a > b ? a : b; }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline double rsqrt(double x) { return 1.0 / sqrt(x); }
inline float rcbrtf(float x) { return 1.0f / cbrtf(x); }
inline float __expf(float x) { return expf(x); }
inline float __exp10f(float x) { return powf(10.0f, x); }
inline float __logf(float x) { return logf(x); }
inline float __log2f(float x) { return log2f(x); }
inline float __log10f(float x) { return log10f(x); }
inline float __sinf(float x) { return sinf(x); }
inline float __cosf(float x) { return cosf(x); }
inline float __tanf(float x) { return tanf(x); }
inline float __powf(float x, float y) { return powf(x, y); }
inline void __sincosf(float x, float* s, float* c) { *s = sinf(x); *c = cosf(x); }
inline float __fdividef(float x, float y) { return x / y; }
inline float fdividef(float x, float y) { return x / y; }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fsqrt_rn(float x) { return sqrtf(x); }
inline float __frsqrt_rn(float x) { return 1.0f / sqrtf(x); }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __fma_rn(double a, double b, double c) { return fma(a, b, c); }
inline float normcdff(float x) { return 0.5f * erfcf(-x * 0.70710678118654752f); }
inline int __float2int_rn(float x) { return (int)nearbyintf(x); }
inline int __float2int_rz(float x) { return (int)x; }
inline int __float2int_rd(float x) { return (int)floorf(x); }
inline int __float2int_ru(float x) { return (int)ceilf(x); }
inline unsigned __float2uint_rn(float x) { return (unsigned)nearbyintf(x); }
inline float __int2float_rn(int x) { return (float)x; }
inline float __uint2float_rn(unsigned x) { return (float)x; }
inline int __double2int_rn(double x) { return (int)nearbyint(x); }
inline float __double2float_rn(double x) { return (float)x; }
inline long long __float2ll_rn(float x) { return (long long)nearbyintf(x); }

#include "jitlab_simt_fp16.h"

// printf is the C library's name: runtime.cpp defines it for the snippet's library (silent in the race
// check's second run), and the snippet is compiled with -fno-builtin-printf so no call becomes puts().

// ---- the host side: launches (`k<<<g, b, s, st>>>(args)` is rewritten to launcher(k, g, b, s, st)(args))
// and the CUDA runtime calls a kernel-only snippet's host code makes, over host memory ------------------
extern "C" int jitlab_simt_launch(unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                                  size_t shared_bytes, void (*body)(void*), void* closure, const char* kernel);
// The same, for a kernel with a lock-step twin: `steps(steps_closure)` runs one block (it returns 0, having run
// nothing, when the block is too large for its slots); plain runs take it.
extern "C" int jitlab_simt_launch_steps(unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                                        size_t shared_bytes, void (*body)(void*), void* closure,
                                        int (*steps)(void*), void* steps_closure, const char* kernel);
extern "C" const char* jitlab_simt_error();
extern "C" const char* jitlab_simt_error_name();

enum cudaError_t {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorLaunchFailure = 719,  // every emulator diagnostic: jitlab_simt_error() says which
};
typedef cudaError_t cudaError;
typedef void* cudaStream_t;
typedef void* cudaEvent_t;
enum cudaMemcpyKind { cudaMemcpyHostToHost, cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice,
                      cudaMemcpyDefault };
namespace jitlab_simt {
inline thread_local cudaError_t last_error = cudaSuccess;
template <class... P>
struct Launcher {
    void (*kernel)(P...);
    dim3 grid, block;
    size_t shared;
    template <class... A>
    void operator()(A&&... args) const {
        static_assert(sizeof...(A) == sizeof...(P), "kernel launched with the wrong number of arguments");
        auto body = [&, k = kernel]() { k(static_cast<P>(args)...); };
        int e = jitlab_simt_launch(grid.x, grid.y, grid.z, block.x, block.y, block.z, shared,
                                   [](void* c) { (*static_cast<decltype(body)*>(c))(); }, &body, "kernel");
        if (e) last_error = (cudaError_t)e;
    }
};
template <class... P>
inline Launcher<P...> launcher(void (*kernel)(P...), dim3 grid, dim3 block, size_t shared = 0, cudaStream_t = 0) {
    return Launcher<P...>{kernel, grid, block, shared};
}
}  // namespace jitlab_simt
inline cudaError_t cudaGetLastError() {
    cudaError_t e = jitlab_simt::last_error;
    jitlab_simt::last_error = cudaSuccess;
    return e;
}
inline cudaError_t cudaPeekAtLastError() { return jitlab_simt::last_error; }
inline const char* cudaGetErrorName(cudaError_t e) {
    return e == cudaSuccess ? "cudaSuccess" : e == cudaErrorLaunchFailure ? jitlab_simt_error_name()
         : e == cudaErrorInvalidConfiguration ? "cudaErrorInvalidConfiguration"
         : e == cudaErrorMemoryAllocation ? "cudaErrorMemoryAllocation" : "cudaErrorInvalidValue";
}
inline const char* cudaGetErrorString(cudaError_t e) {
    return e == cudaSuccess ? "no error" : e == cudaErrorLaunchFailure ? jitlab_simt_error()
         : e == cudaErrorInvalidConfiguration ? "invalid configuration argument"
         : e == cudaErrorMemoryAllocation ? "out of memory" : "invalid argument";
}
inline cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }
inline cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
template <class T>
inline cudaError_t cudaMalloc(T** p, size_t bytes) {
    *p = static_cast<T*>(std::malloc(bytes ? bytes : 1));
    return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
inline cudaError_t cudaFree(void* p) { std::free(p); return cudaSuccess; }
inline cudaError_t cudaMemcpy(void* d, const void* s, size_t n, cudaMemcpyKind) { std::memmove(d, s, n); return cudaSuccess; }
inline cudaError_t cudaMemcpyAsync(void* d, const void* s, size_t n, cudaMemcpyKind, cudaStream_t = 0) {
    std::memmove(d, s, n);
    return cudaSuccess;
}
inline cudaError_t cudaMemset(void* d, int v, size_t n) { std::memset(d, v, n); return cudaSuccess; }
// __device__ and __constant__ variables are the library's own globals here: a symbol is the variable itself.
template <class T>
inline cudaError_t cudaMemcpyToSymbol(T& symbol, const void* src, size_t n, size_t offset = 0,
                                      cudaMemcpyKind = cudaMemcpyHostToDevice) {
    if (offset + n > sizeof(T)) return cudaErrorInvalidValue;
    std::memcpy(reinterpret_cast<char*>(&symbol) + offset, src, n);
    return cudaSuccess;
}
template <class T>
inline cudaError_t cudaMemcpyFromSymbol(void* dst, const T& symbol, size_t n, size_t offset = 0,
                                        cudaMemcpyKind = cudaMemcpyDeviceToHost) {
    if (offset + n > sizeof(T)) return cudaErrorInvalidValue;
    std::memcpy(dst, reinterpret_cast<const char*>(&symbol) + offset, n);
    return cudaSuccess;
}
template <class T>
inline cudaError_t cudaMemcpyToSymbolAsync(T& symbol, const void* src, size_t n, size_t offset = 0,
                                           cudaMemcpyKind k = cudaMemcpyHostToDevice, cudaStream_t = 0) {
    return cudaMemcpyToSymbol(symbol, src, n, offset, k);
}
template <class T>
inline cudaError_t cudaGetSymbolAddress(void** p, T& symbol) {
    *p = &symbol;
    return cudaSuccess;
}
