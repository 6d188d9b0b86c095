#include <cuda_runtime.h>
#include <cstddef>
#include <tuple>
#include <type_traits>
#include <utility>
#ifndef __launch_bounds__
#define __launch_bounds__(...)
#endif
namespace jitlab_rt {
// kernel<<<grid, block, smem, stream>>>(args...) the way nvcc lowers it: the arguments converted to
// the kernel's parameter types, then cudaLaunchKernel with the kernel's host stub. A launch error is
// reported by cudaGetLastError(), as after <<<...>>>.
template <typename... P>
struct Launch {
  void (*kernel)(P...);
  dim3 grid, block;
  std::size_t smem;
  cudaStream_t stream;
  template <typename... A>
  void operator()(A&&... args) const {
    static_assert(sizeof...(A) == sizeof...(P), "kernel launched with the wrong number of arguments");
    std::tuple<std::decay_t<P>...> values(std::forward<A>(args)...);
    std::apply([this](auto&... v) {
      void* pointers[] = {static_cast<void*>(&v)..., nullptr};
      cudaLaunchKernel(reinterpret_cast<const void*>(kernel), grid, block, pointers, smem, stream);
    }, values);
  }
};
template <typename... P>
inline Launch<P...> launch(void (*kernel)(P...), dim3 grid, dim3 block, std::size_t smem = 0,
                           cudaStream_t stream = 0) {
  return Launch<P...>{kernel, grid, block, smem, stream};
}
}  // namespace jitlab_rt
// The C++ runtime API that cuda_runtime.h declares only for nvcc (#if defined(__CUDACC__)): the
// symbol and kernel-attribute templates host code calls with a __constant__ variable or a kernel.
template <class T>
static inline cudaError_t cudaMemcpyToSymbol(const T& symbol, const void* src, size_t count, size_t offset = 0,
                                             cudaMemcpyKind kind = cudaMemcpyHostToDevice) {
  return ::cudaMemcpyToSymbol((const void*)&symbol, src, count, offset, kind);
}
template <class T>
static inline cudaError_t cudaMemcpyToSymbolAsync(const T& symbol, const void* src, size_t count, size_t offset = 0,
                                                  cudaMemcpyKind kind = cudaMemcpyHostToDevice, cudaStream_t stream = 0) {
  return ::cudaMemcpyToSymbolAsync((const void*)&symbol, src, count, offset, kind, stream);
}
template <class T>
static inline cudaError_t cudaMemcpyFromSymbol(void* dst, const T& symbol, size_t count, size_t offset = 0,
                                               cudaMemcpyKind kind = cudaMemcpyDeviceToHost) {
  return ::cudaMemcpyFromSymbol(dst, (const void*)&symbol, count, offset, kind);
}
template <class T>
static inline cudaError_t cudaMemcpyFromSymbolAsync(void* dst, const T& symbol, size_t count, size_t offset = 0,
                                                    cudaMemcpyKind kind = cudaMemcpyDeviceToHost, cudaStream_t stream = 0) {
  return ::cudaMemcpyFromSymbolAsync(dst, (const void*)&symbol, count, offset, kind, stream);
}
template <class T>
static inline cudaError_t cudaGetSymbolAddress(void** devPtr, const T& symbol) {
  return ::cudaGetSymbolAddress(devPtr, (const void*)&symbol);
}
template <class T>
static inline cudaError_t cudaGetSymbolSize(size_t* size, const T& symbol) {
  return ::cudaGetSymbolSize(size, (const void*)&symbol);
}
template <class T>
static inline cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* attr, T* entry) {
  return ::cudaFuncGetAttributes(attr, (const void*)entry);
}
template <class T>
static inline cudaError_t cudaFuncSetAttribute(T* entry, cudaFuncAttribute attr, int value) {
  return ::cudaFuncSetAttribute((const void*)entry, attr, value);
}
template <class T>
static inline cudaError_t cudaFuncSetCacheConfig(T* func, cudaFuncCache config) {
  return ::cudaFuncSetCacheConfig((const void*)func, config);
}
// The integer and floating min/max that nvcc's host pass declares (CUDA's math_functions.hpp).
#define JITLAB_MINMAX(A, B, R) \
  static inline R min(A a, B b) { return (R)a < (R)b ? (R)a : (R)b; } \
  static inline R max(A a, B b) { return (R)a > (R)b ? (R)a : (R)b; }
JITLAB_MINMAX(int, int, int)
JITLAB_MINMAX(unsigned int, unsigned int, unsigned int)
JITLAB_MINMAX(int, unsigned int, unsigned int)
JITLAB_MINMAX(unsigned int, int, unsigned int)
JITLAB_MINMAX(long, long, long)
JITLAB_MINMAX(unsigned long, unsigned long, unsigned long)
JITLAB_MINMAX(long, unsigned long, unsigned long)
JITLAB_MINMAX(unsigned long, long, unsigned long)
JITLAB_MINMAX(long long, long long, long long)
JITLAB_MINMAX(unsigned long long, unsigned long long, unsigned long long)
JITLAB_MINMAX(long long, unsigned long long, unsigned long long)
JITLAB_MINMAX(unsigned long long, long long, unsigned long long)
JITLAB_MINMAX(float, float, float)
JITLAB_MINMAX(double, double, double)
JITLAB_MINMAX(float, double, double)
JITLAB_MINMAX(double, float, double)
#undef JITLAB_MINMAX
