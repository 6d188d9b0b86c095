// softmax: y[r, c] = exp(x[r, c] - max_r) / sum_c' exp(x[r, c'] - max_r), over each row of a rows x cols
// float32 matrix (row-major), like torch.softmax(x, dim=-1). Subtracting the row max changes nothing
// mathematically and keeps exp() <= 1: exp(89) is already inf in float32.
//
//   k = jitlab.load("kernels/softmax.cu")
//   k.softmax_kernel1(y, x, rows, cols, grid=rows, block=256)            # versions 1 and 2: a block per row
//   k.softmax_kernel3(y, x, rows, cols, grid=(rows + 7) // 8, block=256)  # version 3: 8 rows per block
//   k.softmax_kernel4(y, x, rows, cols, grid=rows, block=128)            # version 4: block >= cols / 32
//   (blocks are a multiple of 32 threads; kernels/softmax.ref.py picks the block per row length)
//
// Napkin math (H100 SXM: 3.35 TB/s HBM3, 132 SMs, 64K registers and 228 KB shared memory per SM). At
// 16384 x 4096 (2^26 floats, 256 MiB in and out) the least a softmax can move is one read of x and
// one write of y: 537 MB, 160 us at the peak. Each extra pass over x costs another 268 MB unless L2
// (50 MB) still holds the row. The math is ~5 FLOPs per 8 bytes, so only bytes and latency matter.
//
// version 1 (softmax_kernel1): three passes over global memory (max, sum of exp, write): the textbook; x read 3x.
// version 2 (softmax_kernel2): online softmax, (max, sum) in one pass, then the write: x read 2x; long rows.
// version 3 (softmax_kernel3): a warp per row, shuffles only (no shared memory, no barrier): short rows (<~1K).
// version 4 (softmax_kernel4): a block per row kept in registers, float4: x read once; rows of 1K to 32K.

// ---------------------------------------------------------------------------------------------
// shared pieces

// Every lane gets the warp's max / sum (a butterfly: lane i swaps with lane i ^ k at each step).
__device__ __forceinline__ float softmax_warp_max(float v) {
#pragma unroll
    for (int k = 16; k > 0; k >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, k));
    return v;
}

__device__ __forceinline__ float softmax_warp_sum(float v) {
#pragma unroll
    for (int k = 16; k > 0; k >>= 1) v += __shfl_xor_sync(0xffffffffu, v, k);
    return v;
}

// Every thread of the block gets the result. red holds one slot per warp. The trailing barrier
// lets the next reduction reuse red: no warp writes it before every warp has read it.
__device__ float softmax_block_max(float v, float* red) {
    v = softmax_warp_max(v);
    if (blockDim.x == 32) return v;  // one warp: nothing to combine (uniform across the block)
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) red[warp] = v;
    __syncthreads();
    v = softmax_warp_max(lane < (blockDim.x >> 5) ? red[lane] : -INFINITY);
    __syncthreads();
    return v;
}

__device__ float softmax_block_sum(float v, float* red) {
    v = softmax_warp_sum(v);
    if (blockDim.x == 32) return v;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) red[warp] = v;
    __syncthreads();
    v = softmax_warp_sum(lane < (blockDim.x >> 5) ? red[lane] : 0.0f);
    __syncthreads();
    return v;
}

// Online softmax state of a set of numbers: m = their max, s = sum of exp(x - m). An empty set (or
// one of -inf only) is (-inf, 0).
__device__ __forceinline__ void softmax_online_add(float& m, float& s, float x) {
    if (x > m) {
        s = s * __expf(m - x) + 1.0f;  // the old terms were relative to m: rescale them to x
        m = x;
    } else if (x > -INFINITY) {        // -inf adds exp(-inf) = 0; skipping it avoids -inf - -inf = NaN
        s += __expf(x - m);
    }
}

// (m, s) of the union of two sets. base = 0 when both are empty, so s stays 0 instead of NaN.
__device__ __forceinline__ void softmax_merge(float& m, float& s, float m2, float s2) {
    const float mm = fmaxf(m, m2);
    const float base = mm == -INFINITY ? 0.0f : mm;
    s = s * __expf(m - base) + s2 * __expf(m2 - base);
    m = mm;
}

__device__ __forceinline__ void softmax_warp_merge(float& m, float& s) {
#pragma unroll
    for (int k = 16; k > 0; k >>= 1) {
        const float m2 = __shfl_xor_sync(0xffffffffu, m, k), s2 = __shfl_xor_sync(0xffffffffu, s, k);
        softmax_merge(m, s, m2, s2);
    }
}

__device__ void softmax_block_merge(float& m, float& s, float* red_m, float* red_s) {
    softmax_warp_merge(m, s);
    if (blockDim.x == 32) return;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) {
        red_m[warp] = m;
        red_s[warp] = s;
    }
    __syncthreads();
    const bool has = lane < (blockDim.x >> 5);
    m = has ? red_m[lane] : -INFINITY;
    s = has ? red_s[lane] : 0.0f;
    softmax_warp_merge(m, s);
    __syncthreads();
}

__device__ __forceinline__ bool softmax_aligned16(const void* p) {
    return (reinterpret_cast<size_t>(p) & 15) == 0;
}

// ---------------------------------------------------------------------------------------------
// version 1: three passes, a block per row

__global__ void softmax_kernel1(float* y, const float* x, int rows, int cols) {
    __shared__ float red[32];
    for (int row = blockIdx.x; row < rows; row += gridDim.x) {
        const float* xr = x + (size_t)row * cols;
        float* yr = y + (size_t)row * cols;
        float m = -INFINITY;
        for (int c = threadIdx.x; c < cols; c += blockDim.x) m = fmaxf(m, xr[c]);
        m = softmax_block_max(m, red);
        float s = 0.0f;
        for (int c = threadIdx.x; c < cols; c += blockDim.x) s += expf(xr[c] - m);
        s = softmax_block_sum(s, red);
        // An all -inf row gives m = -inf and NaN here, as torch does (no element is more likely).
        for (int c = threadIdx.x; c < cols; c += blockDim.x) yr[c] = expf(xr[c] - m) / s;
    }
}

// ---------------------------------------------------------------------------------------------
// version 2: online softmax, a block per row: one pass for (m, s), one to write

// Out of line (__noinline__): inlined as version 4's fallback, it cost version 4 registers.
__device__ __noinline__ void softmax_row_online(float* yr, const float* xr, int cols, float* red_m, float* red_s) {
    float m = -INFINITY, s = 0.0f;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) softmax_online_add(m, s, xr[c]);
    softmax_block_merge(m, s, red_m, red_s);
    const float inv = 1.0f / s;
    for (int c = threadIdx.x; c < cols; c += blockDim.x) yr[c] = __expf(xr[c] - m) * inv;
}

__global__ void softmax_kernel2(float* y, const float* x, int rows, int cols) {
    __shared__ float red_m[32], red_s[32];
    for (int row = blockIdx.x; row < rows; row += gridDim.x) {
        softmax_row_online(y + (size_t)row * cols, x + (size_t)row * cols, cols, red_m, red_s);
    }
}

// ---------------------------------------------------------------------------------------------
// version 3: a warp per row, shuffles only

__global__ void softmax_kernel3(float* y, const float* x, int rows, int cols) {
    const int lane = threadIdx.x & 31;
    const int warps = blockDim.x >> 5;
    // Warps never wait for each other, so a warp past the last row can simply leave.
    for (int row = blockIdx.x * warps + (threadIdx.x >> 5); row < rows; row += gridDim.x * warps) {
        const float* xr = x + (size_t)row * cols;
        float* yr = y + (size_t)row * cols;
        float m = -INFINITY, s = 0.0f;
        for (int c = lane; c < cols; c += 32) softmax_online_add(m, s, xr[c]);  // 128 B per warp load
        softmax_warp_merge(m, s);  // every lane ends with the row's (m, s)
        const float inv = 1.0f / s;
        for (int c = lane; c < cols; c += 32) yr[c] = __expf(xr[c] - m) * inv;  // x again, from L1/L2
    }
}

// ---------------------------------------------------------------------------------------------
// version 4: the row in registers, float4, a block per row

// Floats a thread keeps: 8 float4. 1024 threads x 32 = 32,768 floats (128 KB, half the register
// file); at 4096 columns the block is 128 threads, and ~9 such blocks fit per SM, 144 KB in flight.
#define SOFTMAX_PER_THREAD 32

// __launch_bounds__(1024): at most 64 registers a thread, so a 1024-thread block always fits.
__global__ void __launch_bounds__(1024) softmax_kernel4(float* __restrict__ y, const float* __restrict__ x,
                                                        int rows, int cols) {
    __shared__ float red_m[32], red_s[32];
    const int tid = threadIdx.x, nt = blockDim.x;
    if ((long long)cols > (long long)nt * SOFTMAX_PER_THREAD) {  // too long to hold: version 2 (uniform)
        for (int row = blockIdx.x; row < rows; row += gridDim.x) {
            softmax_row_online(y + (size_t)row * cols, x + (size_t)row * cols, cols, red_m, red_s);
        }
        return;
    }
    // Rows start 16-byte aligned when cols % 4 == 0 and the tensors do (torch's allocations are).
    const bool vec = (cols & 3) == 0 && softmax_aligned16(x) && softmax_aligned16(y);
    // Slot j holds float4 number j * nt + tid (in v[4j..4j+3]) or column j * nt + tid: the slot is in the
    // row when j < nv, the same for every row, so one compare per slot tells padding apart.
    const int units = vec ? cols >> 2 : cols;
    const int nv = min(vec ? SOFTMAX_PER_THREAD / 4 : SOFTMAX_PER_THREAD, (units - tid + nt - 1) / nt);
    for (int row = blockIdx.x; row < rows; row += gridDim.x) {
        const float* xr = x + (size_t)row * cols;
        float* yr = y + (size_t)row * cols;
        // Every load is coalesced across the warp, and all 8 (or 32) are issued before the first is used.
        float v[SOFTMAX_PER_THREAD];
        if (vec) {
            const float4* x4 = reinterpret_cast<const float4*>(xr) + tid;
#pragma unroll
            for (int j = 0; j < SOFTMAX_PER_THREAD / 4; ++j) {
                // x is read once: evict-first (__ldcs) keeps it from pushing out what L2 could reuse.
                const float4 t = j < nv ? __ldcs(x4 + j * nt) : make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY);
                v[4 * j] = t.x;
                v[4 * j + 1] = t.y;
                v[4 * j + 2] = t.z;
                v[4 * j + 3] = t.w;
            }
        } else {  // cols % 4 != 0 (rows start misaligned) or a misaligned view: one float at a time
#pragma unroll
            for (int j = 0; j < SOFTMAX_PER_THREAD; ++j) v[j] = j < nv ? __ldcs(xr + tid + j * nt) : -INFINITY;
        }
        // Max, then exp once (kept in v), then sum: with the row in registers the online trick is not
        // needed, and one exp per element beats the (m, s) merge's two.
        float m = -INFINITY;
#pragma unroll
        for (int j = 0; j < SOFTMAX_PER_THREAD; ++j) m = fmaxf(m, v[j]);
        m = softmax_block_max(m, red_m);
        float s = 0.0f;
#pragma unroll
        for (int j = 0; j < SOFTMAX_PER_THREAD; ++j) {
            v[j] = __expf(v[j] - m);  // padding: exp(-inf - m) = 0
            s += v[j];
        }
        s = softmax_block_sum(s, red_s);
        const float inv = 1.0f / s;
        if (vec) {
            float4* y4 = reinterpret_cast<float4*>(yr) + tid;
#pragma unroll
            for (int j = 0; j < SOFTMAX_PER_THREAD / 4; ++j) {
                if (j < nv) {
                    __stcs(y4 + j * nt, make_float4(v[4 * j] * inv, v[4 * j + 1] * inv, v[4 * j + 2] * inv,
                                                    v[4 * j + 3] * inv));
                }
            }
        } else {
#pragma unroll
            for (int j = 0; j < SOFTMAX_PER_THREAD; ++j) {
                if (j < nv) __stcs(yr + tid + j * nt, v[j] * inv);
            }
        }
    }
}
