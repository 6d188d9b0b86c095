// add2_cpu: c = a + b on the CPU, a kernel-only C++ snippet (raw pointers, no torch header).
//
//   m = jitlab.load("kernels/add2_cpu.cpp")
//   m.add2_cpu(c, a, b, n)          # c, a, b: float32 CPU tensors
//
// The same loader as for CUDA, so machines without a GPU get the whole edit-build-run loop.
#include <cstdint>

void add2_cpu(float* c, const float* a, const float* b, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
        c[i] = a[i] + b[i];
    }
}
