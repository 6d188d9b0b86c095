// bias_gelu: y = gelu(x + bias[col]) over a rows x cols float32 matrix (row-major), fused: the bias add
// of a transformer MLP's first linear layer and its activation in one pass over memory. GELU is the exact
// one, 0.5 v (1 + erf(v / sqrt(2))), torch's default: erff matches torch to float32 rounding, tanh would not.
//
//   k = jitlab.load("kernels/bias_gelu.cu")
//   k.bias_gelu_kernel(y, x, bias, rows, cols, grid=(rows * cols + 255) // 256, block=256)   # version 0
//   sms = torch.cuda.get_device_properties(0).multi_processor_count
//   gx = (cols // 4 + 255) // 256                   # threads along a row: one per float4 column
//   k.bias_gelu_kernel1(y, x, bias, rows, cols, grid=(gx, max(1, sms * 4 // gx)), block=256)   # version 1
//   (any grid is correct for version 1: both dimensions are grid-stride loops)
//
// Napkin math: torch eager runs x + bias, then gelu: two kernels, 16 bytes per element; fused, 8 (read x,
// write y), so ~2x faster at the same bandwidth. At ~3 TB/s about 80 instructions per element fit in the
// memory time, and erff is most of them: memory-bound only while the index math stays cheap.
//
// version 0 (bias_gelu_kernel): one float per thread, column = i % cols; fused, but `%` is a software division.
// version 1 (bias_gelu_kernel1): float4 columns, rows down the grid, bias in registers; the fast one.

__device__ __forceinline__ float bias_gelu_erf(float v) {
    // torch's order of operations: v * 0.5 * (1 + erf(v * M_SQRT1_2))
    return v * 0.5f * (1.0f + erff(v * 0.70710678118654752440f));
}

// ---------------------------------------------------------------------------------------------
// version 0: one float per thread, flat index

__global__ void bias_gelu_kernel(float* y, const float* x, const float* bias, int rows, int cols) {
    const long long n = (long long)rows * cols;
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        y[i] = bias_gelu_erf(x[i] + bias[i % cols]);
    }
}

// ---------------------------------------------------------------------------------------------
// version 1: columns of float4 across threads, rows down the grid, bias in registers

#define BIAS_GELU_ROWS1 4  // rows a thread has in flight per trip

__device__ __forceinline__ bool bias_gelu_aligned16(const void* p) {
    return (reinterpret_cast<size_t>(p) & 15) == 0;
}

__device__ __forceinline__ float4 bias_gelu4(float4 v, float4 b) {
    return make_float4(bias_gelu_erf(v.x + b.x), bias_gelu_erf(v.y + b.y),
                       bias_gelu_erf(v.z + b.z), bias_gelu_erf(v.w + b.w));
}

// A thread's column never changes while it walks down the rows, so its 4 bias values are loaded once
// (read-only path, __ldg) and kept in registers, and the address is row * (cols / 4) + column: no
// division. float4 needs cols % 4 == 0 and 16-byte aligned pointers, else the same walk runs one float
// at a time. __launch_bounds__(256, 4): at most 64 registers, so 4 blocks of 256 stay resident per SM
// and the suggested grid is exactly one wave.
__global__ void __launch_bounds__(256, 4) bias_gelu_kernel1(float* __restrict__ y,
                                                            const float* __restrict__ x,
                                                            const float* __restrict__ bias,
                                                            int rows, int cols) {
    const int col_step = gridDim.x * blockDim.x;
    const long long row_step = gridDim.y;
    const bool vec = (cols % 4 == 0) && bias_gelu_aligned16(y) && bias_gelu_aligned16(x) &&
                     bias_gelu_aligned16(bias);
    if (vec) {
        const int quads = cols / 4;  // float4s per row
        const float4* x4 = reinterpret_cast<const float4*>(x);
        float4* y4 = reinterpret_cast<float4*>(y);
        for (int q = blockIdx.x * blockDim.x + threadIdx.x; q < quads; q += col_step) {
            const float4 b = __ldg(reinterpret_cast<const float4*>(bias) + q);
            long long r = blockIdx.y;
            // Rows r, r + row_step, r + 2 row_step, r + 3 row_step: loads first, then the math.
            // __ldcs/__stcs (evict-first): x and y stream through L2 once; the bias is what stays.
            for (; r + (BIAS_GELU_ROWS1 - 1) * row_step < rows; r += BIAS_GELU_ROWS1 * row_step) {
                float4 v[BIAS_GELU_ROWS1];
#pragma unroll
                for (int j = 0; j < BIAS_GELU_ROWS1; ++j) v[j] = __ldcs(x4 + (r + j * row_step) * quads + q);
#pragma unroll
                for (int j = 0; j < BIAS_GELU_ROWS1; ++j) __stcs(y4 + (r + j * row_step) * quads + q, bias_gelu4(v[j], b));
            }
#pragma unroll 1
            for (; r < rows; r += row_step) {  // fewer than BIAS_GELU_ROWS1 rows left
                __stcs(y4 + r * quads + q, bias_gelu4(__ldcs(x4 + r * quads + q), b));
            }
        }
    } else {
        // Same walk, one float at a time: odd widths, or a view that does not start on 16 bytes.
        for (int col = blockIdx.x * blockDim.x + threadIdx.x; col < cols; col += col_step) {
            const float b = __ldg(bias + col);
#pragma unroll 1
            for (long long r = blockIdx.y; r < rows; r += row_step) {
                y[r * cols + col] = bias_gelu_erf(x[r * cols + col] + b);
            }
        }
    }
}
