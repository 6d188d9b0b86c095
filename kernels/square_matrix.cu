// square_matrix: result = matrix * matrix elementwise (seed 004, torch-style: torch::Tensor in and out).
//
//   m = jitlab.load("kernels/square_matrix.cu")
//   m.square_matrix(x)    # version 0, the seed as it was (prints "pid N" from the host)
//   m.square_matrix1(x)   # version 1: same result, any shape, no printf
//   m.square_matrix2(x)   # version 2: version 1's bytes, torch's tile-per-block layout
//
// Napkin math (H100 SXM: 3.35 TB/s HBM3, 132 SMs). At 2^28 floats the op reads 1 GiB and writes
// 1 GiB: 2.1 GB, 0.64 ms at the peak; torch's x * x runs at about 2.93 TB/s. One multiply per
// 8 bytes: only the memory system matters.
//
// version 0 (square_matrix_kernel, seed 004): a 2-D grid of 16 x 16 blocks, one float per thread,
//   row/column index math per element. Coalesced along a row, but each warp covers only two
//   16-float half rows (two 64-byte pieces), and a width that is not a multiple of 16 leaves idle
//   threads at every row's end.
// version 1 (square_matrix_kernel1): elementwise ops do not care about rows, so the matrix is one
//   flat array of n floats:
//   - float4: one 16-byte load brings 4 floats, a warp moves 512 B per instruction (4 whole 128-byte
//     lines), 4x fewer memory instructions than one float per thread.
//   - 4 float4s per thread per trip, the 4 loads issued before the first store (they are
//     independent): 64 B in flight per thread. Little's law wants ~2.7 MB in flight machine-wide
//     (3.35 TB/s x ~0.8 us); at 32 registers (sm_90) 8 blocks of 256 fit per SM: 132 x 2048 x 64 B
//     = 17 MB.
//   - grid = SMs x (blocks of 256 that fit on an SM, asked of cudaOccupancyMaxActiveBlocksPerMultiprocessor):
//     exactly one resident wave that walks the array with a grid-stride loop, so no block waits for
//     a second wave and any register count the compiler picks stays correct and fast.
//   - float4 needs 16-byte alignment: torch allocations are aligned at offset 0; a view starting
//     elsewhere takes the scalar loop. The n % 4 floats after the last float4 are done one per thread.
//   - launched on torch's current stream (the seed uses the legacy default stream).
// version 2 (square_matrix_kernel2): torch's own elementwise layout instead of a persistent grid
//   (the persistent kernels of this project measured 0.94-0.95x torch): every block does one
//   contiguous tile of 256 threads x 16 floats = 4096 floats (16 KB), thread t loading float4s
//   tile/4 + j x 256 + t for j = 0..3 (coalesced, 512 B per warp instruction), all 4 loads before
//   the first store, with streaming hints (__ldcs/__stcs: every byte is touched once). The grid is
//   n / 4096 blocks (65540 at 16383 x 16386) instead of one wave walking the whole array: the blocks
//   resident at any moment (8 per SM at <= 32 registers, 1056 on 132 SMs, 17 MB of loads in flight,
//   ~6x Little's 2.7 MB) cover one contiguous ~17 MB window, so DRAM pages are opened once and read
//   through, where a grid-stride wave scatters each thread's accesses 4 MB apart. 62 waves of short
//   blocks, so the partial last wave costs < 1 block time (~1.5%). Only the last tile checks bounds
//   (float4s that fit, then the n % 4 floats); a misaligned pointer takes a scalar tile loop
//   (uniform branch). A loop over tiles (start += gridDim.x x 4096) keeps any grid correct; 64-bit.

__global__ void square_matrix_kernel(const float* matrix, float* result, int width, int height) {
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x;

    if (row < height && col < width) {
        int idx = row * width + col;
        result[idx] = matrix[idx] * matrix[idx];
    }
}

#include <sys/types.h>
#include <unistd.h>

torch::Tensor square_matrix(torch::Tensor matrix) {
    const auto height = matrix.size(0);
    const auto width = matrix.size(1);
    pid_t pid = getpid();
    printf("pid %d " , pid);
    auto result = torch::empty_like(matrix);

    dim3 threads_per_block(16, 16);
    dim3 number_of_blocks((width + threads_per_block.x - 1) / threads_per_block.x,
                          (height + threads_per_block.y - 1) / threads_per_block.y);

    square_matrix_kernel<<<number_of_blocks, threads_per_block>>>(
        matrix.data_ptr<float>(), result.data_ptr<float>(), width, height);

    return result;
}

// ---------------------------------------------------------------------------------------------
// version 1: flat float4 grid-stride loop, 4 float4s in flight per thread, grid sized to the machine

// c10's device-generic guard and stream interface, not c10/cuda/*.h: a CPU build of torch (where
// these snippets are compile-checked) ships without c10/cuda's generated config header.
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#define SQUARE_BLOCK1 256
#define SQUARE_UNROLL1 4

__device__ __forceinline__ float4 square_float4(float4 v) {
    return make_float4(v.x * v.x, v.y * v.y, v.z * v.z, v.w * v.w);
}

// n is 64-bit: a flat index over a large matrix passes 2^31.
__global__ void __launch_bounds__(SQUARE_BLOCK1) square_matrix_kernel1(const float* __restrict__ matrix,
                                                                      float* __restrict__ result,
                                                                      int64_t n) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    const int64_t tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const bool aligned = ((reinterpret_cast<size_t>(matrix) | reinterpret_cast<size_t>(result)) & 15) == 0;
    const int64_t n4 = aligned ? n / 4 : 0;  // whole float4s; none if a pointer is misaligned

    const float4* x4 = reinterpret_cast<const float4*>(matrix);
    float4* y4 = reinterpret_cast<float4*>(result);
    int64_t i = tid;
    // This thread's float4s i, i + stride, ...: each load is coalesced across the warp.
    for (; i + (SQUARE_UNROLL1 - 1) * stride < n4; i += SQUARE_UNROLL1 * stride) {
        float4 v[SQUARE_UNROLL1];
#pragma unroll
        for (int j = 0; j < SQUARE_UNROLL1; ++j) v[j] = x4[i + j * stride];
#pragma unroll
        for (int j = 0; j < SQUARE_UNROLL1; ++j) y4[i + j * stride] = square_float4(v[j]);
    }
#pragma unroll 1
    for (; i < n4; i += stride) y4[i] = square_float4(x4[i]);  // fewer than 4 float4s left
#pragma unroll 1
    for (int64_t k = 4 * n4 + tid; k < n; k += stride) result[k] = matrix[k] * matrix[k];  // the tail
}

// A CUDA runtime error as a Python RuntimeError naming the call.
static void square_matrix_check1(cudaError_t err, const char* what = "kernel launch") {
    TORCH_CHECK(err == cudaSuccess, what, " failed: ", cudaGetErrorString(err));
}

// torch's current stream on t's device, so the kernel is ordered with torch's own work.
static cudaStream_t square_matrix_stream1(const torch::Tensor& t) {
    const c10::impl::VirtualGuardImpl impl(t.device().type());
    return static_cast<cudaStream_t>(impl.getStream(t.device()).native_handle());
}

// Blocks for n floats: one resident wave at most, fewer when n is small, never zero.
static int square_matrix_grid1(int64_t n) {
    int device = 0, sms = 0, per_sm = 0;
    square_matrix_check1(cudaGetDevice(&device), "cudaGetDevice");
    square_matrix_check1(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "cudaDeviceGetAttribute");
    square_matrix_check1(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, square_matrix_kernel1, SQUARE_BLOCK1, 0),
                 "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
    const int64_t per_block = (int64_t)SQUARE_BLOCK1 * 4 * SQUARE_UNROLL1;  // floats per block per trip
    const int64_t wanted = (n + per_block - 1) / per_block;
    return (int)std::max<int64_t>(1, std::min<int64_t>(wanted, (int64_t)sms * std::max(per_sm, 1)));
}

torch::Tensor square_matrix1(torch::Tensor matrix) {
    TORCH_CHECK(matrix.is_cuda(), "square_matrix1: matrix must be a CUDA tensor");
    TORCH_CHECK(matrix.scalar_type() == torch::kFloat32, "square_matrix1: matrix must be float32");
    const c10::DeviceGuard device_guard(matrix.device());
    const torch::Tensor x = matrix.contiguous();  // no copy when it already is
    torch::Tensor result = torch::empty_like(x);
    const int64_t n = x.numel();
    if (n == 0) return result;
    square_matrix_kernel1<<<square_matrix_grid1(n), SQUARE_BLOCK1, 0, square_matrix_stream1(x)>>>(
        x.data_ptr<float>(), result.data_ptr<float>(), n);
    square_matrix_check1(cudaGetLastError());
    return result;
}

// ---------------------------------------------------------------------------------------------
// version 2: torch-style tiles, one 4096-float tile per block, a grid of n / 4096 blocks

#define SQUARE_BLOCK2 256
#define SQUARE_VEC2 4                                   // float4s per thread per tile
#define SQUARE_TILE2 (SQUARE_BLOCK2 * 4 * SQUARE_VEC2)  // 4096 floats

__global__ void __launch_bounds__(SQUARE_BLOCK2) square_matrix_kernel2(const float* __restrict__ matrix,
                                                                      float* __restrict__ result,
                                                                      int64_t n) {
    const bool aligned = ((reinterpret_cast<size_t>(matrix) | reinterpret_cast<size_t>(result)) & 15) == 0;
    const float4* x4 = reinterpret_cast<const float4*>(matrix);
    float4* y4 = reinterpret_cast<float4*>(result);
    // Normally one trip (grid = number of tiles); the loop only matters if the grid is smaller.
    for (int64_t start = (int64_t)blockIdx.x * SQUARE_TILE2; start < n; start += (int64_t)gridDim.x * SQUARE_TILE2) {
        if (aligned && start + SQUARE_TILE2 <= n) {
            // A whole tile: float4 start / 4 + j * 256 + threadIdx.x, coalesced; 4 loads, then 4 stores.
            const int64_t q0 = (start >> 2) + threadIdx.x;
            float4 v[SQUARE_VEC2];
#pragma unroll
            for (int j = 0; j < SQUARE_VEC2; ++j) v[j] = __ldcs(x4 + q0 + j * SQUARE_BLOCK2);
#pragma unroll
            for (int j = 0; j < SQUARE_VEC2; ++j) __stcs(y4 + q0 + j * SQUARE_BLOCK2, square_float4(v[j]));
        } else if (aligned) {
            // The last, partial tile: whole float4s while they fit, then the n % 4 floats.
#pragma unroll 1
            for (int j = 0; j < SQUARE_VEC2; ++j) {
                const int64_t q = (start >> 2) + j * SQUARE_BLOCK2 + threadIdx.x;
                if (4 * q + 4 <= n) {
                    y4[q] = square_float4(x4[q]);
                } else {
                    for (int64_t k = 4 * q; k < n && k < 4 * q + 4; ++k) result[k] = matrix[k] * matrix[k];
                }
            }
        } else {
            // A misaligned pointer (uniform branch): the same tile, one float at a time, coalesced.
#pragma unroll 4
            for (int j = 0; j < 4 * SQUARE_VEC2; ++j) {
                const int64_t k = start + j * SQUARE_BLOCK2 + threadIdx.x;
                if (k < n) result[k] = matrix[k] * matrix[k];
            }
        }
    }
}

torch::Tensor square_matrix2(torch::Tensor matrix) {
    TORCH_CHECK(matrix.is_cuda(), "square_matrix2: matrix must be a CUDA tensor");
    TORCH_CHECK(matrix.scalar_type() == torch::kFloat32, "square_matrix2: matrix must be float32");
    const c10::DeviceGuard device_guard(matrix.device());
    const torch::Tensor x = matrix.contiguous();  // no copy when it already is
    torch::Tensor result = torch::empty_like(x);
    const int64_t n = x.numel();
    if (n == 0) return result;
    // One block per tile, capped at the grid's x limit (the kernel's tile loop covers the rest).
    const int blocks = (int)std::min<int64_t>((n + SQUARE_TILE2 - 1) / SQUARE_TILE2, 2147483647);
    square_matrix_kernel2<<<blocks, SQUARE_BLOCK2, 0, square_matrix_stream1(x)>>>(
        x.data_ptr<float>(), result.data_ptr<float>(), n);
    square_matrix_check1(cudaGetLastError());
    return result;
}
