// vector_add: c = a + b for 1-D float32 tensors (seed 002, torch-style, bound in vector_add_binding.cpp).
//
//   m = jitlab.load("kernels/vector_add")
//   c = m.vector_add(a, b)    # version 0, the seed as it was
//   c = m.vector_add1(a, b)   # version 1
//   c = m.vector_add2(a, b)   # version 2
//
// Napkin math (H100 SXM: 3.35 TB/s, 132 SMs): 2^28 floats read 2 GiB and write 1 GiB, 0.96 ms at the
// peak; Little's law wants ~2.7 MB of loads in flight (3.35 TB/s x ~0.8 us of DRAM latency).
//
// version 0 (vector_add, seed 002): one float per thread, N / 256 blocks; the baseline (int N overflows at 2^31).
// version 1 (vector_add_kernel1, vector_add_launcher1): float4 over one resident wave; the simpler fast one.
// version 2 (vector_add_kernel2, vector_add_launcher2): torch's layout, a 4096-float tile per block; faster at large N.
// Versions 1 and 2 keep the seed's checks and add a length check, 64-bit N and torch's current stream.

#include <torch/extension.h>
#define BLOCK_SIZE 256
__global__ void vector_add(const float* a, const float* b, float* c, int N) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) {
        c[i] = a[i] + b[i];
    }
}
torch::Tensor vector_add_launcher(torch::Tensor& a, torch::Tensor& b) {
    // Check the Tensor Dimension
    if (a.dim() != 1 || b.dim() != 1) {
        throw std::runtime_error("Input tensor must be one-dimensional");
    }
    // Check the Tensor Data Type
    if (a.scalar_type() != torch::kFloat32 || b.scalar_type() != torch::kFloat32) {
        throw std::runtime_error("Input tensor must be type of float32");
    }
    torch::Tensor c = torch::empty_like(a);
    auto N = a.sizes()[0]; // array length
    // Launch kernel
    int blocksPerGrid = (N + BLOCK_SIZE - 1) / BLOCK_SIZE;
    vector_add<<<blocksPerGrid, BLOCK_SIZE>>>(a.data_ptr<float>(),
        b.data_ptr<float>(), c.data_ptr<float>(), N);
    return c;
}

// ---------------------------------------------------------------------------------------------
// version 1: float4 grid-stride loop, 8 loads in flight per thread, one resident wave

// c10's device-generic guard and stream interface, not c10/cuda/*.h: a CPU build of torch (where
// these snippets are compile-checked) ships without c10/cuda's generated config header.
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#define VECTOR_ADD_BLOCK1 256
#define VECTOR_ADD_UNROLL1 4

__device__ __forceinline__ float4 vector_add_float4(float4 x, float4 y) {
    return make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
}

// A warp's float4 load moves 512 B (four whole 128-byte lines): 4x fewer instructions than version 0.
// The 8 loads of a trip are independent, so they go out before the adds; the grid (vector_add_grid1)
// is one resident wave, asked of the occupancy API, so no block waits for a second wave.

__global__ void __launch_bounds__(VECTOR_ADD_BLOCK1) vector_add_kernel1(const float* __restrict__ a,
                                                                      const float* __restrict__ b,
                                                                      float* __restrict__ c,
                                                                      int64_t N) {
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    const int64_t tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const bool aligned = ((reinterpret_cast<size_t>(a) | reinterpret_cast<size_t>(b) |
                           reinterpret_cast<size_t>(c)) & 15) == 0;
    const int64_t n4 = aligned ? N / 4 : 0;  // whole float4s; none if a pointer is misaligned

    const float4* a4 = reinterpret_cast<const float4*>(a);
    const float4* b4 = reinterpret_cast<const float4*>(b);
    float4* c4 = reinterpret_cast<float4*>(c);
    int64_t i = tid;
    // This thread's float4s i, i + stride, ...: each load is coalesced across the warp.
    for (; i + (VECTOR_ADD_UNROLL1 - 1) * stride < n4; i += VECTOR_ADD_UNROLL1 * stride) {
        float4 x[VECTOR_ADD_UNROLL1], y[VECTOR_ADD_UNROLL1];
#pragma unroll
        for (int j = 0; j < VECTOR_ADD_UNROLL1; ++j) {
            x[j] = a4[i + j * stride];
            y[j] = b4[i + j * stride];
        }
#pragma unroll
        for (int j = 0; j < VECTOR_ADD_UNROLL1; ++j) c4[i + j * stride] = vector_add_float4(x[j], y[j]);
    }
#pragma unroll 1
    for (; i < n4; i += stride) c4[i] = vector_add_float4(a4[i], b4[i]);  // fewer than 4 float4s left
#pragma unroll 1
    for (int64_t k = 4 * n4 + tid; k < N; k += stride) c[k] = a[k] + b[k];  // the tail
}

// A CUDA runtime error as a Python RuntimeError naming the call.
static void vector_add_check1(cudaError_t err, const char* what = "kernel launch") {
    TORCH_CHECK(err == cudaSuccess, what, " failed: ", cudaGetErrorString(err));
}

// torch's current stream on t's device, so the kernel is ordered with torch's own work.
static cudaStream_t vector_add_stream1(const torch::Tensor& t) {
    const c10::impl::VirtualGuardImpl impl(t.device().type());
    return static_cast<cudaStream_t>(impl.getStream(t.device()).native_handle());
}

// Blocks for N floats: one resident wave at most, fewer when N is small, never zero.
static int vector_add_grid1(int64_t N) {
    int device = 0, sms = 0, per_sm = 0;
    vector_add_check1(cudaGetDevice(&device), "cudaGetDevice");
    vector_add_check1(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "cudaDeviceGetAttribute");
    vector_add_check1(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, vector_add_kernel1, VECTOR_ADD_BLOCK1, 0),
                      "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
    const int64_t per_block = (int64_t)VECTOR_ADD_BLOCK1 * 4 * VECTOR_ADD_UNROLL1;  // floats per block per trip
    const int64_t wanted = (N + per_block - 1) / per_block;
    return (int)std::max<int64_t>(1, std::min<int64_t>(wanted, (int64_t)sms * std::max(per_sm, 1)));
}

torch::Tensor vector_add_launcher1(torch::Tensor& a, torch::Tensor& b) {
    // The seed's checks, with the seed's messages.
    if (a.dim() != 1 || b.dim() != 1) {
        throw std::runtime_error("Input tensor must be one-dimensional");
    }
    if (a.scalar_type() != torch::kFloat32 || b.scalar_type() != torch::kFloat32) {
        throw std::runtime_error("Input tensor must be type of float32");
    }
    // The seed reads past the end of b when b is shorter.
    TORCH_CHECK(a.size(0) == b.size(0), "vector_add1: a and b differ in length (", a.size(0), " vs ", b.size(0), ")");
    TORCH_CHECK(a.is_cuda() && b.device() == a.device(), "vector_add1: a and b must be on the same CUDA device");
    const c10::DeviceGuard device_guard(a.device());
    const torch::Tensor x = a.contiguous(), y = b.contiguous();  // no copy when they already are
    torch::Tensor c = torch::empty_like(x);
    const int64_t N = x.size(0);
    if (N == 0) return c;
    vector_add_kernel1<<<vector_add_grid1(N), VECTOR_ADD_BLOCK1, 0, vector_add_stream1(x)>>>(
        x.data_ptr<float>(), y.data_ptr<float>(), c.data_ptr<float>(), N);
    vector_add_check1(cudaGetLastError());
    return c;
}

// ---------------------------------------------------------------------------------------------
// version 2: torch-style tiles, one 4096-float tile per block, a grid of N / 4096 blocks

#define VECTOR_ADD_BLOCK2 256
#define VECTOR_ADD_VEC2 4                                       // float4s per input per thread per tile
#define VECTOR_ADD_TILE2 (VECTOR_ADD_BLOCK2 * 4 * VECTOR_ADD_VEC2)  // 4096 floats

// Why tiles: the blocks resident at any moment cover one contiguous window of each array, so DRAM
// pages are opened once and read through (a grid-stride wave scatters each thread's accesses 4 MB
// apart); at 2^28 the N / 4096 blocks are ~62 waves, so the partial last wave costs < 2%.
// Plain loads: the __ldcs/__stcs (evict-first) hints measured 0.96x torch on the H100 against 0.99x
// without them for this two-input add (docs/benchmarks.md).

__global__ void __launch_bounds__(VECTOR_ADD_BLOCK2) vector_add_kernel2(const float* __restrict__ a,
                                                                      const float* __restrict__ b,
                                                                      float* __restrict__ c,
                                                                      int64_t N) {
    const bool aligned = ((reinterpret_cast<size_t>(a) | reinterpret_cast<size_t>(b) |
                           reinterpret_cast<size_t>(c)) & 15) == 0;
    const float4* a4 = reinterpret_cast<const float4*>(a);
    const float4* b4 = reinterpret_cast<const float4*>(b);
    float4* c4 = reinterpret_cast<float4*>(c);
    // Normally one trip (grid = number of tiles); the loop only matters if the grid is smaller.
    for (int64_t start = (int64_t)blockIdx.x * VECTOR_ADD_TILE2; start < N;
         start += (int64_t)gridDim.x * VECTOR_ADD_TILE2) {
        if (aligned && start + VECTOR_ADD_TILE2 <= N) {
            // A whole tile: float4 start / 4 + j * 256 + threadIdx.x, coalesced; 8 loads, then 4 stores.
            const int64_t q0 = (start >> 2) + threadIdx.x;
            float4 x[VECTOR_ADD_VEC2], y[VECTOR_ADD_VEC2];
#pragma unroll
            for (int j = 0; j < VECTOR_ADD_VEC2; ++j) {
                x[j] = a4[q0 + j * VECTOR_ADD_BLOCK2];
                y[j] = b4[q0 + j * VECTOR_ADD_BLOCK2];
            }
#pragma unroll
            for (int j = 0; j < VECTOR_ADD_VEC2; ++j) {
                c4[q0 + j * VECTOR_ADD_BLOCK2] = vector_add_float4(x[j], y[j]);
            }
        } else if (aligned) {
            // The last, partial tile: whole float4s while they fit, then the N % 4 floats.
#pragma unroll 1
            for (int j = 0; j < VECTOR_ADD_VEC2; ++j) {
                const int64_t q = (start >> 2) + j * VECTOR_ADD_BLOCK2 + threadIdx.x;
                if (4 * q + 4 <= N) {
                    c4[q] = vector_add_float4(a4[q], b4[q]);
                } else {
                    for (int64_t k = 4 * q; k < N && k < 4 * q + 4; ++k) c[k] = a[k] + b[k];
                }
            }
        } else {
            // A misaligned pointer (uniform branch): the same tile, one float at a time, coalesced.
#pragma unroll 4
            for (int j = 0; j < 4 * VECTOR_ADD_VEC2; ++j) {
                const int64_t k = start + j * VECTOR_ADD_BLOCK2 + threadIdx.x;
                if (k < N) c[k] = a[k] + b[k];
            }
        }
    }
}

torch::Tensor vector_add_launcher2(torch::Tensor& a, torch::Tensor& b) {
    // The seed's checks, with the seed's messages, and version 1's.
    if (a.dim() != 1 || b.dim() != 1) {
        throw std::runtime_error("Input tensor must be one-dimensional");
    }
    if (a.scalar_type() != torch::kFloat32 || b.scalar_type() != torch::kFloat32) {
        throw std::runtime_error("Input tensor must be type of float32");
    }
    TORCH_CHECK(a.size(0) == b.size(0), "vector_add2: a and b differ in length (", a.size(0), " vs ", b.size(0), ")");
    TORCH_CHECK(a.is_cuda() && b.device() == a.device(), "vector_add2: a and b must be on the same CUDA device");
    const c10::DeviceGuard device_guard(a.device());
    const torch::Tensor x = a.contiguous(), y = b.contiguous();  // no copy when they already are
    torch::Tensor c = torch::empty_like(x);
    const int64_t N = x.size(0);
    if (N == 0) return c;
    // One block per tile, capped at the grid's x limit (the kernel's tile loop covers the rest).
    const int blocks = (int)std::min<int64_t>((N + VECTOR_ADD_TILE2 - 1) / VECTOR_ADD_TILE2, 2147483647);
    vector_add_kernel2<<<blocks, VECTOR_ADD_BLOCK2, 0, vector_add_stream1(x)>>>(
        x.data_ptr<float>(), y.data_ptr<float>(), c.data_ptr<float>(), N);
    vector_add_check1(cudaGetLastError());
    return c;
}
