// The tensor cores' ceiling through WMMA: each warp multiplies fragments already in registers, over
// and over, with no memory traffic in the loop (benchmarks/wmma_peak.py times it). Eight independent
// 16 x 16 accumulators per warp (2 x 4, as a warp tile) keep the tensor pipe busy.

#include <mma.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>

using namespace nvcuda;

template <typename T>
__device__ __forceinline__ void wmma_peak_body(float* out, const T* a, const T* b, int iters) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa[2];
    wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> fb[4];
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][4];
#pragma unroll
    for (int i = 0; i < 2; ++i) wmma::load_matrix_sync(fa[i], a + i * 256, 16);
#pragma unroll
    for (int j = 0; j < 4; ++j) wmma::load_matrix_sync(fb[j], b + j * 256, 16);
#pragma unroll
    for (int i = 0; i < 2; ++i) {
#pragma unroll
        for (int j = 0; j < 4; ++j) wmma::fill_fragment(acc[i][j], 0.0f);
    }
    for (int it = 0; it < iters; ++it) {
#pragma unroll
        for (int i = 0; i < 2; ++i) {
#pragma unroll
            for (int j = 0; j < 4; ++j) wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
        }
    }
    const size_t warp = (size_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
#pragma unroll
        for (int j = 0; j < 4; ++j) wmma::store_matrix_sync(out + (warp * 8 + i * 4 + j) * 256, acc[i][j], 16, wmma::mem_row_major);
    }
}

__global__ void wmma_peak_fp16(float* out, const __half* a, const __half* b, int iters) {
    wmma_peak_body(out, a, b, iters);
}

__global__ void wmma_peak_bf16(float* out, const __nv_bfloat16* a, const __nv_bfloat16* b, int iters) {
#if __CUDA_ARCH__ >= 800
    wmma_peak_body(out, a, b, iters);
#endif
}
