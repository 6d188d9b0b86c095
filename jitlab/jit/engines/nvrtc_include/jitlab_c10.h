// c10::Half and c10::BFloat16 for NVRTC's device code (NVRTC cannot read c10's headers, which need the C++
// standard library): the same layout (16 bits), conversions and arithmetic as c10's Half-inl.h and
// BFloat16-inl.h, so a kernel template instantiated on torch's half types computes what nvcc's build does:
// arithmetic in float, rounded to nearest-even when stored; with float or double the result is float or
// double, with an integer the 16-bit type.
#pragma once
#include <cuda_fp16.h>
#include <cuda_bf16.h>

namespace c10 {
#define JITLAB_C10_TYPE(T, RAW, TO, FROM)                                                              \
  struct alignas(2) T {                                                                                \
    unsigned short x;                                                                                  \
    struct from_bits_t {};                                                                             \
    static constexpr __host__ __device__ from_bits_t from_bits() { return from_bits_t(); }             \
    T() = default;                                                                                     \
    constexpr __host__ __device__ T(unsigned short bits, from_bits_t) : x(bits) {}                     \
    __device__ T(float value) { RAW r = TO(value); x = *reinterpret_cast<unsigned short*>(&r); }       \
    __device__ T(const RAW& value) : x(*reinterpret_cast<const unsigned short*>(&value)) {}           \
    __device__ operator float() const { return FROM(*reinterpret_cast<const RAW*>(&x)); }              \
    __device__ operator RAW() const { return *reinterpret_cast<const RAW*>(&x); }                      \
  };                                                                                                   \
  __device__ inline T operator+(const T& a, const T& b) { return static_cast<float>(a) + static_cast<float>(b); } \
  __device__ inline T operator-(const T& a, const T& b) { return static_cast<float>(a) - static_cast<float>(b); } \
  __device__ inline T operator*(const T& a, const T& b) { return static_cast<float>(a) * static_cast<float>(b); } \
  __device__ inline T operator/(const T& a, const T& b) { return static_cast<float>(a) / static_cast<float>(b); } \
  __device__ inline T operator-(const T& a) { return -static_cast<float>(a); }                        \
  __device__ inline T& operator+=(T& a, const T& b) { a = a + b; return a; }                          \
  __device__ inline T& operator-=(T& a, const T& b) { a = a - b; return a; }                          \
  __device__ inline T& operator*=(T& a, const T& b) { a = a * b; return a; }                          \
  __device__ inline T& operator/=(T& a, const T& b) { a = a / b; return a; }                          \
  JITLAB_C10_MIXED(T, float, float)                                                                    \
  JITLAB_C10_MIXED(T, double, double)                                                                  \
  JITLAB_C10_INT(T, int)                                                                               \
  JITLAB_C10_INT(T, long long)                                                                         \
  JITLAB_C10_INT(T, long)                                                                              \
  __device__ inline float& operator+=(float& a, const T& b) { return a += static_cast<float>(b); }    \
  __device__ inline float& operator-=(float& a, const T& b) { return a -= static_cast<float>(b); }    \
  __device__ inline float& operator*=(float& a, const T& b) { return a *= static_cast<float>(b); }    \
  __device__ inline float& operator/=(float& a, const T& b) { return a /= static_cast<float>(b); }
// T with float or double: computed in that type. With an integer: the integer made T first, as c10 does.
#define JITLAB_C10_INT(T, O)                                                                           \
  __device__ inline T operator+(T a, O b) { return a + T(static_cast<float>(b)); }                      \
  __device__ inline T operator-(T a, O b) { return a - T(static_cast<float>(b)); }                      \
  __device__ inline T operator*(T a, O b) { return a * T(static_cast<float>(b)); }                      \
  __device__ inline T operator/(T a, O b) { return a / T(static_cast<float>(b)); }                      \
  __device__ inline T operator+(O a, T b) { return T(static_cast<float>(a)) + b; }                      \
  __device__ inline T operator-(O a, T b) { return T(static_cast<float>(a)) - b; }                      \
  __device__ inline T operator*(O a, T b) { return T(static_cast<float>(a)) * b; }                      \
  __device__ inline T operator/(O a, T b) { return T(static_cast<float>(a)) / b; }
#define JITLAB_C10_MIXED(T, O, R)                                                                      \
  __device__ inline R operator+(T a, O b) { return R(static_cast<float>(a) + static_cast<O>(b)); }      \
  __device__ inline R operator-(T a, O b) { return R(static_cast<float>(a) - static_cast<O>(b)); }      \
  __device__ inline R operator*(T a, O b) { return R(static_cast<float>(a) * static_cast<O>(b)); }      \
  __device__ inline R operator/(T a, O b) { return R(static_cast<float>(a) / static_cast<O>(b)); }      \
  __device__ inline R operator+(O a, T b) { return R(static_cast<O>(a) + static_cast<float>(b)); }      \
  __device__ inline R operator-(O a, T b) { return R(static_cast<O>(a) - static_cast<float>(b)); }      \
  __device__ inline R operator*(O a, T b) { return R(static_cast<O>(a) * static_cast<float>(b)); }      \
  __device__ inline R operator/(O a, T b) { return R(static_cast<O>(a) / static_cast<float>(b)); }
JITLAB_C10_TYPE(Half, __half, __float2half, __half2float)
JITLAB_C10_TYPE(BFloat16, __nv_bfloat16, __float2bfloat16, __bfloat162float)
#undef JITLAB_C10_MIXED
#undef JITLAB_C10_INT
#undef JITLAB_C10_TYPE
}  // namespace c10
namespace at {
using c10::BFloat16;
using c10::Half;
}  // namespace at
