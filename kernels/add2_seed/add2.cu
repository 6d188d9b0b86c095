// Seed 001 (NN-CUDA-Example): add2 with a grid-stride loop, as a three-file extension.
//   m = jitlab.load("kernels/add2_seed")      # add2.h + add2.cu + add2.cpp
//   m.torch_launch_add2(c, a, b, n)
#include "add2.h"

__global__ void add2_kernel(float* c,
                            const float* a,
                            const float* b,
                            int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; \
            i < n; i += gridDim.x * blockDim.x) {
        c[i] = a[i] + b[i];
    }
}

void launch_add2(float* c,
                 const float* a,
                 const float* b,
                 int n) {
    dim3 grid((n + 1023) / 1024);
    dim3 block(1024);
    add2_kernel<<<grid, block>>>(c, a, b, n);
}
