// jitlab_simt_fp16.h: __half and __nv_bfloat16 for the CPU emulator, bit-exact with CUDA's.
//
// Each is its 16 bits (the layout torch's float16/bfloat16 tensors have). Arithmetic is done in
// float and rounded back to nearest-even: for + - * of two 16-bit values the float result is
// exact, so the rounding is CUDA's single rounding; / and fma may differ from the GPU in the last
// bit in rare double-rounding cases.
#pragma once

namespace jitlab_simt {
inline uint16_t float_to_half_bits(float f) {  // round to nearest even, inf and NaN kept
    uint32_t x = bits_of(f) & 0xffffffffu;
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t mag = x & 0x7fffffffu;
    if (mag >= 0x7f800000u) return (uint16_t)(sign | (mag > 0x7f800000u ? 0x7e00u : 0x7c00u));
    if (mag >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);  // rounds past 65504: inf
    if (mag < 0x38800000u) {                                     // a half subnormal (or zero)
        float a = from_bits<float>(mag) + 0.5f;                  // the FPU rounds at 2^-24 steps
        return (uint16_t)(sign | ((bits_of(a) & 0xffffffffu) - 0x3f000000u));
    }
    uint32_t odd = (mag >> 13) & 1u;
    mag += 0xc8000fffu + odd;  // rebias exponent (-112 << 23) and round to nearest even
    return (uint16_t)(sign | (mag >> 13));
}
inline float half_bits_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (exp == 0x1f) return from_bits<float>(sign | 0x7f800000u | (man << 13));
    if (exp == 0) return (sign ? -1.0f : 1.0f) * (float)man * 5.9604644775390625e-8f;  // man * 2^-24
    return from_bits<float>(sign | ((exp + 112u) << 23) | (man << 13));
}
inline uint16_t float_to_bf16_bits(float f) {
    uint32_t x = (uint32_t)bits_of(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u);  // quiet NaN
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}
inline float bf16_bits_to_float(uint16_t b) { return from_bits<float>((uint64_t)b << 16); }
}  // namespace jitlab_simt

#define JITLAB_HALF_TYPE(T, TO_BITS, TO_FLOAT)                                                        \
    struct T {                                                                                     \
        uint16_t bits_;                                                                            \
        T() = default;                                                                             \
        T(float f) : bits_(jitlab_simt::TO_BITS(f)) {}                                             \
        T(double f) : bits_(jitlab_simt::TO_BITS((float)f)) {}                                     \
        T(int i) : bits_(jitlab_simt::TO_BITS((float)i)) {}                                        \
        T(unsigned i) : bits_(jitlab_simt::TO_BITS((float)i)) {}                                   \
        T(long long i) : bits_(jitlab_simt::TO_BITS((float)i)) {}                                  \
        operator float() const { return jitlab_simt::TO_FLOAT(bits_); }                            \
        static T raw(uint16_t b) { T t; t.bits_ = b; return t; }                                    \
        T& operator+=(T o) { return *this = T(float(*this) + float(o)); }                          \
        T& operator-=(T o) { return *this = T(float(*this) - float(o)); }                          \
        T& operator*=(T o) { return *this = T(float(*this) * float(o)); }                          \
        T& operator/=(T o) { return *this = T(float(*this) / float(o)); }                          \
    };                                                                                             \
    inline T operator+(T a, T b) { return T(float(a) + float(b)); }                                \
    inline T operator-(T a, T b) { return T(float(a) - float(b)); }                                \
    inline T operator*(T a, T b) { return T(float(a) * float(b)); }                                \
    inline T operator/(T a, T b) { return T(float(a) / float(b)); }                                \
    inline T operator-(T a) { return T::raw((uint16_t)(a.bits_ ^ 0x8000u)); }                      \
    inline bool operator==(T a, T b) { return float(a) == float(b); }                              \
    inline bool operator!=(T a, T b) { return float(a) != float(b); }                              \
    inline bool operator<(T a, T b) { return float(a) < float(b); }                               \
    inline bool operator<=(T a, T b) { return float(a) <= float(b); }                              \
    inline bool operator>(T a, T b) { return float(a) > float(b); }                                \
    inline bool operator>=(T a, T b) { return float(a) >= float(b); }                              \
    struct T##2 { T x, y; };

JITLAB_HALF_TYPE(__half, float_to_half_bits, half_bits_to_float)
JITLAB_HALF_TYPE(__nv_bfloat16, float_to_bf16_bits, bf16_bits_to_float)
typedef __half half;
typedef __half2 half2;
typedef __nv_bfloat16 nv_bfloat16;
typedef __nv_bfloat162 nv_bfloat162;
struct __half_raw { unsigned short x; };
struct __nv_bfloat16_raw { unsigned short x; };

// __half: conversions and arithmetic by CUDA's names (rounding suffixes all round to nearest here,
// except the explicit _rz/_rd/_ru integer conversions).
inline __half __float2half(float f) { return __half(f); }
inline __half __float2half_rn(float f) { return __half(f); }
inline __half __double2half(double f) { return __half((float)f); }
inline float __half2float(__half h) { return float(h); }
inline __half __int2half_rn(int i) { return __half((float)i); }
inline int __half2int_rn(__half h) { return (int)nearbyintf(float(h)); }
inline int __half2int_rz(__half h) { return (int)float(h); }
inline __half __ushort_as_half(unsigned short b) { return __half::raw(b); }
inline unsigned short __half_as_ushort(__half h) { return h.bits_; }
inline short __half_as_short(__half h) { return (short)h.bits_; }
inline __half __short_as_half(short b) { return __half::raw((uint16_t)b); }
inline __half __hadd(__half a, __half b) { return a + b; }
inline __half __hsub(__half a, __half b) { return a - b; }
inline __half __hmul(__half a, __half b) { return a * b; }
inline __half __hdiv(__half a, __half b) { return a / b; }
inline __half __hneg(__half a) { return -a; }
inline __half __habs(__half a) { return __half::raw((uint16_t)(a.bits_ & 0x7fffu)); }
inline __half __hfma(__half a, __half b, __half c) { return __half(fmaf(float(a), float(b), float(c))); }
inline __half __hmax(__half a, __half b) { return float(a) >= float(b) ? a : b; }
inline __half __hmin(__half a, __half b) { return float(a) <= float(b) ? a : b; }
inline bool __heq(__half a, __half b) { return a == b; }
inline bool __hne(__half a, __half b) { return a != b; }
inline bool __hlt(__half a, __half b) { return a < b; }
inline bool __hle(__half a, __half b) { return a <= b; }
inline bool __hgt(__half a, __half b) { return a > b; }
inline bool __hge(__half a, __half b) { return a >= b; }
inline bool __hisnan(__half a) { return std::isnan(float(a)); }
inline bool __hisinf(__half a) { return std::isinf(float(a)); }
inline __half hexp(__half a) { return __half(expf(float(a))); }
inline __half hlog(__half a) { return __half(logf(float(a))); }
inline __half hsqrt(__half a) { return __half(sqrtf(float(a))); }
inline __half hrsqrt(__half a) { return __half(1.0f / sqrtf(float(a))); }
inline __half2 __halves2half2(__half a, __half b) { return {a, b}; }
inline __half2 __half2half2(__half a) { return {a, a}; }
inline __half2 make_half2(__half a, __half b) { return {a, b}; }
inline __half2 __floats2half2_rn(float a, float b) { return {__half(a), __half(b)}; }
inline __half2 __float2half2_rn(float a) { return {__half(a), __half(a)}; }
inline float2 __half22float2(__half2 h) { return {float(h.x), float(h.y)}; }
inline __half2 __float22half2_rn(float2 f) { return {__half(f.x), __half(f.y)}; }
inline float __low2float(__half2 h) { return float(h.x); }
inline float __high2float(__half2 h) { return float(h.y); }
inline __half __low2half(__half2 h) { return h.x; }
inline __half __high2half(__half2 h) { return h.y; }
inline __half2 __hadd2(__half2 a, __half2 b) { return {a.x + b.x, a.y + b.y}; }
inline __half2 __hsub2(__half2 a, __half2 b) { return {a.x - b.x, a.y - b.y}; }
inline __half2 __hmul2(__half2 a, __half2 b) { return {a.x * b.x, a.y * b.y}; }
inline __half2 __h2div(__half2 a, __half2 b) { return {a.x / b.x, a.y / b.y}; }
inline __half2 __hfma2(__half2 a, __half2 b, __half2 c) { return {__hfma(a.x, b.x, c.x), __hfma(a.y, b.y, c.y)}; }
inline __half2 operator+(__half2 a, __half2 b) { return __hadd2(a, b); }
inline __half2 operator*(__half2 a, __half2 b) { return __hmul2(a, b); }

// __nv_bfloat16
inline __nv_bfloat16 __float2bfloat16(float f) { return __nv_bfloat16(f); }
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16(f); }
inline float __bfloat162float(__nv_bfloat16 b) { return float(b); }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short b) { return __nv_bfloat16::raw(b); }
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 b) { return b.bits_; }
inline __nv_bfloat16 __hadd(__nv_bfloat16 a, __nv_bfloat16 b) { return a + b; }
inline __nv_bfloat16 __hsub(__nv_bfloat16 a, __nv_bfloat16 b) { return a - b; }
inline __nv_bfloat16 __hmul(__nv_bfloat16 a, __nv_bfloat16 b) { return a * b; }
inline __nv_bfloat16 __hdiv(__nv_bfloat16 a, __nv_bfloat16 b) { return a / b; }
inline __nv_bfloat16 __hneg(__nv_bfloat16 a) { return -a; }
inline __nv_bfloat16 __hfma(__nv_bfloat16 a, __nv_bfloat16 b, __nv_bfloat16 c) {
    return __nv_bfloat16(fmaf(float(a), float(b), float(c)));
}
inline __nv_bfloat16 __hmax(__nv_bfloat16 a, __nv_bfloat16 b) { return float(a) >= float(b) ? a : b; }
inline __nv_bfloat16 __hmin(__nv_bfloat16 a, __nv_bfloat16 b) { return float(a) <= float(b) ? a : b; }
inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) { return {__nv_bfloat16(a), __nv_bfloat16(b)}; }
inline float2 __bfloat1622float2(__nv_bfloat162 h) { return {float(h.x), float(h.y)}; }
inline float __low2float(__nv_bfloat162 h) { return float(h.x); }
inline float __high2float(__nv_bfloat162 h) { return float(h.y); }
inline __nv_bfloat162 __float2bfloat162_rn(float a) { return {__nv_bfloat16(a), __nv_bfloat16(a)}; }
inline __nv_bfloat162 __halves2bfloat162(__nv_bfloat16 a, __nv_bfloat16 b) { return {a, b}; }
inline __nv_bfloat162 __bfloat162bfloat162(__nv_bfloat16 a) { return {a, a}; }
inline __nv_bfloat162 make_bfloat162(__nv_bfloat16 a, __nv_bfloat16 b) { return {a, b}; }
inline __nv_bfloat162 __float22bfloat162_rn(float2 f) { return {__nv_bfloat16(f.x), __nv_bfloat16(f.y)}; }
inline __nv_bfloat16 __low2bfloat16(__nv_bfloat162 h) { return h.x; }
inline __nv_bfloat16 __high2bfloat16(__nv_bfloat162 h) { return h.y; }
inline __nv_bfloat162 __hadd2(__nv_bfloat162 a, __nv_bfloat162 b) { return {a.x + b.x, a.y + b.y}; }
inline __nv_bfloat162 __hsub2(__nv_bfloat162 a, __nv_bfloat162 b) { return {a.x - b.x, a.y - b.y}; }
inline __nv_bfloat162 __hmul2(__nv_bfloat162 a, __nv_bfloat162 b) { return {a.x * b.x, a.y * b.y}; }
inline __nv_bfloat162 __h2div(__nv_bfloat162 a, __nv_bfloat162 b) { return {a.x / b.x, a.y / b.y}; }
inline __nv_bfloat162 __hfma2(__nv_bfloat162 a, __nv_bfloat162 b, __nv_bfloat162 c) {
    return {__hfma(a.x, b.x, c.x), __hfma(a.y, b.y, c.y)};
}
inline __nv_bfloat162 __hmax2(__nv_bfloat162 a, __nv_bfloat162 b) { return {__hmax(a.x, b.x), __hmax(a.y, b.y)}; }
inline __nv_bfloat162 __hmin2(__nv_bfloat162 a, __nv_bfloat162 b) { return {__hmin(a.x, b.x), __hmin(a.y, b.y)}; }
inline __nv_bfloat162 operator+(__nv_bfloat162 a, __nv_bfloat162 b) { return __hadd2(a, b); }
inline __nv_bfloat162 operator*(__nv_bfloat162 a, __nv_bfloat162 b) { return __hmul2(a, b); }
inline __half2 __hmax2(__half2 a, __half2 b) { return {__hmax(a.x, b.x), __hmax(a.y, b.y)}; }
inline __half2 __hmin2(__half2 a, __half2 b) { return {__hmin(a.x, b.x), __hmin(a.y, b.y)}; }
inline __half2 __hneg2(__half2 a) { return {-a.x, -a.y}; }
inline __half2 operator-(__half2 a, __half2 b) { return __hsub2(a, b); }

// 16-bit atomics: CUDA has atomicAdd for both.
inline __half atomicAdd(__half* p, __half v) {
    return jitlab_simt::atomic_update(p, [&](__half a) { return a + v; });
}
inline __nv_bfloat16 atomicAdd(__nv_bfloat16* p, __nv_bfloat16 v) {
    return jitlab_simt::atomic_update(p, [&](__nv_bfloat16 a) { return a + v; });
}
