// scale_half: y = a * x in half precision (fp16 storage, fp32 math), a kernel-only snippet.
//
//   k = jitlab.load("kernels/scale_half.cu")
//   k.scale_half(y, x, 0.5, n, grid=(n + 255) // 256, block=256)   # y, x: float16 CUDA tensors
//
// `__half*` parameters take float16 tensors; the `__half a` scalar takes a Python float.
#include <cuda_fp16.h>

__global__ void scale_half(__half* y, const __half* x, __half a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        // Convert to float for the multiply: fp16 has 11 bits of mantissa, fp32 24.
        y[i] = __float2half(__half2float(a) * __half2float(x[i]));
    }
}
