// two_norm: c[0] = ||a - b||_2 = sqrt(sum((a - b)^2)) of two float32 arrays (seed 000, torch-style
// folder: this kernel file, two_norm_kernel.h, the binding two_norm_bind.cpp).
//
//   m = jitlab.load("kernels/two_norm")
//   m.two_norm(b, a, c, n, m)   # version 0, the seed: one block, n * m <= 4096, printf per element
//   m.two_norm1(a, b, c)        # version 1: any size, c[0] = ||a - b||_2, deterministic
//
// Napkin math (H100 SXM: 3.35 TB/s, 132 SMs): 2^28 floats of each input are 2.1 GB read, 0.64 ms at
// the peak; two FLOPs (sub, fma) per 8 bytes, so it should run as fast as a copy.
//
// version 0 (two_norm_kernel, seed 000): one block, (a - b)^2 in shared memory; a shared-memory lesson, 1 SM of 132.
// version 1 (two_norm_kernel1, two_norm_kernel1_finish): float4 block sums, then one block adds them; any size.

#include <cstdio>  //  用于print结果

__global__ void two_norm_kernel(const float *a,const float *b,float *c, int n, int m) {
    __shared__ float a_minus_b[64*64];  // 不支持可变数量的参数,矩阵维度最多为(4096,4096)

    // 异常、越界处理
    if(threadIdx.x==0)
        printf("after compute a-b:\n");
    for(int row=threadIdx.x;row<n;row+=blockDim.x){
        for(int col=0;col<m;col++){  // 循环展开
            float a_ij = a[row * m + col];
            float b_ij = b[row * m + col];
            a_minus_b[row * m + col] = (a_ij - b_ij) * (a_ij - b_ij);
            printf("tensor a-b,coord=(%d,%d), value=%f\n", row,col, a_minus_b[row * m + col]) ;
        }
    }

    __syncthreads();  // 等待整个a_minus_b被计算完毕

    // 将每行结果加到每行的第一个元素上
    if(threadIdx.x==0)
        printf("after add rows to first col\n");
    for(int row=threadIdx.x;row<n;row+=blockDim.x){
        for(int col=1;col<m;col++){  // 循环展开
            a_minus_b[row * m + 0] += a_minus_b[row * m + col];
        }
        printf("tensor a-b,row=%d, value=%f\n", row, a_minus_b[row * m + 0]);
    }

    __syncthreads();  // 等待结果都加到了第一行

    // 将所有结果加到第一行第一列元素上
	if(threadIdx.x == 0){
        for(int i=1;i<n;i++)
            a_minus_b[0] += a_minus_b[i * m + 0];
        c[0] = sqrtf(a_minus_b[0]);
    }
}

void launch_two_norm(const float *a,const float *b,float *c, int n, int m) {
    two_norm_kernel<<<1, 512>>>(a, b, c, n, m);
}

// ---------------------------------------------------------------------------------------------
// version 1: multi-block, any size, float4 loads, deterministic two-pass reduction

#include <cstdint>
#include <cuda_runtime.h>
#include "two_norm_kernel.h"

#define TWO_NORM_BLOCK1 256   // a multiple of 32 (the block sum works in whole warps)
#define TWO_NORM_UNROLL1 4

// acc + |x - y|^2 over the 4 lanes of a float4.
__device__ __forceinline__ float two_norm_sq_add4(float4 x, float4 y, float acc) {
    float d = x.x - y.x;
    acc = fmaf(d, d, acc);
    d = x.y - y.y;
    acc = fmaf(d, d, acc);
    d = x.z - y.z;
    acc = fmaf(d, d, acc);
    d = x.w - y.w;
    return fmaf(d, d, acc);
}

// The sum of v over the block, valid in thread 0. blockDim.x must be a multiple of 32 (<= 1024).
// The additions happen in the same order on every call: the result is deterministic.
__device__ double two_norm_block_sum1(double v) {
    __shared__ double warp_sums[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(0xffffffffu, v, offset);
    if (lane == 0) warp_sums[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < (int)(blockDim.x >> 5) ? warp_sums[lane] : 0.0;
#pragma unroll
        for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(0xffffffffu, v, offset);
    }
    return v;
}

// Pass 1: partials[blockIdx.x] = sum over this block's share of (a - b)^2. One resident wave of blocks
// (two_norm1_blocks), each thread a grid-stride walk of float4 loads, 4 per input per trip, loaded
// before the math. Squares go into 4 float accumulators (independent FMA chains; each holds only
// ~n / (4 x 200K threads) terms on an H100, so float loses nothing that matters); from the thread sums
// on, double.
// No atomics: the order of every addition is fixed by n and the grid: same inputs, same bits.
__global__ void __launch_bounds__(TWO_NORM_BLOCK1) two_norm_kernel1(const float* __restrict__ a,
                                                                   const float* __restrict__ b,
                                                                   double* __restrict__ partials,
                                                                   int64_t n) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    const int64_t tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const bool aligned = ((reinterpret_cast<size_t>(a) | reinterpret_cast<size_t>(b)) & 15) == 0;
    const int64_t n4 = aligned ? n / 4 : 0;  // whole float4s; none if a pointer is misaligned

    const float4* a4 = reinterpret_cast<const float4*>(a);
    const float4* b4 = reinterpret_cast<const float4*>(b);
    float acc[TWO_NORM_UNROLL1] = {};
    int64_t i = tid;
    // This thread's float4s i, i + stride, ...: each load is coalesced across the warp.
    for (; i + (TWO_NORM_UNROLL1 - 1) * stride < n4; i += TWO_NORM_UNROLL1 * stride) {
        float4 x[TWO_NORM_UNROLL1], y[TWO_NORM_UNROLL1];
#pragma unroll
        for (int j = 0; j < TWO_NORM_UNROLL1; ++j) {
            x[j] = a4[i + j * stride];
            y[j] = b4[i + j * stride];
        }
#pragma unroll
        for (int j = 0; j < TWO_NORM_UNROLL1; ++j) acc[j] = two_norm_sq_add4(x[j], y[j], acc[j]);
    }
#pragma unroll 1
    for (; i < n4; i += stride) acc[0] = two_norm_sq_add4(a4[i], b4[i], acc[0]);  // < 4 float4s left
#pragma unroll 1
    for (int64_t k = 4 * n4 + tid; k < n; k += stride) {  // the tail, one float per thread
        const float d = a[k] - b[k];
        acc[1] = fmaf(d, d, acc[1]);
    }
    const double sum = two_norm_block_sum1((double)((acc[0] + acc[1]) + (acc[2] + acc[3])));
    if (threadIdx.x == 0) partials[blockIdx.x] = sum;
}

// Pass 2 (one block): c[0] = sqrt(sum of the partials), in a fixed order. The second launch costs a few
// us; a "last block finishes" scheme (atomic counter) would save it but needs a counter zeroed before
// every call. Double, because adding an H100's ~800 block sums in float would round by up to 6e-8 of
// the total at every step.
__global__ void __launch_bounds__(TWO_NORM_BLOCK1) two_norm_kernel1_finish(const double* __restrict__ partials,
                                                                          int count,
                                                                          float* __restrict__ c) {
    double s = 0.0;
    for (int i = threadIdx.x; i < count; i += blockDim.x) s += partials[i];
    s = two_norm_block_sum1(s);
    if (threadIdx.x == 0) c[0] = (float)sqrt(s);
}

// One resident wave of pass-1 blocks, fewer when n is small, never zero. Any count >= 1 is correct.
int two_norm1_blocks(int64_t n) {
    int device = 0, sms = 1, per_sm = 1;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, two_norm_kernel1, TWO_NORM_BLOCK1, 0) != cudaSuccess) {
        cudaGetLastError();  // clear it: the launch reports anything that is really wrong
        sms = 1;
        per_sm = 1;
    }
    const int64_t per_block = (int64_t)TWO_NORM_BLOCK1 * 4 * TWO_NORM_UNROLL1;  // floats per block per trip
    const int64_t wanted = (n + per_block - 1) / per_block;
    const int64_t wave = (int64_t)sms * (per_sm > 0 ? per_sm : 1);
    return (int)(wanted < 1 ? 1 : (wanted < wave ? wanted : wave));
}

const char* launch_two_norm1(const float* a, const float* b, float* c, double* partials, int blocks,
                             int64_t n, void* stream) {
    cudaStream_t s = static_cast<cudaStream_t>(stream);
    two_norm_kernel1<<<blocks, TWO_NORM_BLOCK1, 0, s>>>(a, b, partials, n);
    two_norm_kernel1_finish<<<1, TWO_NORM_BLOCK1, 0, s>>>(partials, blocks, c);
    const cudaError_t err = cudaGetLastError();
    return err == cudaSuccess ? nullptr : cudaGetErrorString(err);
}
