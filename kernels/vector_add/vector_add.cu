// vector_add: c = a + b for 1-D float32 tensors (seed 002, torch-style, bound in vector_add_binding.cpp).
//
//   m = jitlab.load("kernels/vector_add")
//   m.vector_add(a, b)    # version 0, the seed as it was
//   m.vector_add1(a, b)   # version 1: same checks, same result, float4 + one resident wave
//   m.vector_add2(a, b)   # version 2: same checks, torch's tile-per-block layout
//
// Napkin math (H100 SXM: 3.35 TB/s HBM3, 132 SMs). At 2^28 floats the op reads 2 GiB and writes
// 1 GiB: 3.2 GB, 0.96 ms at the peak; torch's a + b runs at about 2.96 TB/s.
//
// version 0 (vector_add, seed 002): one float per thread, n / 256 blocks of 256. Coalesced, but one
//   4-byte load or store per instruction, and `int N` overflows past 2^31 elements.
// version 1 (vector_add_kernel1 / vector_add_launcher1):
//   - float4: one 16-byte load brings 4 floats, a warp moves 512 B per instruction (4 whole 128-byte
//     lines): 4x fewer memory instructions and index computations.
//   - 4 float4s per input per trip. The 8 loads are independent, so they go out ahead of the adds;
//     ptxas keeps the kernel at 32 registers (sm_90) and so holds 4 of them (64 B) in flight per
//     thread, issuing the next as each pair is added. That still makes 132 SMs x 2048 threads x 64 B
//     = 17 MB in flight, where Little's law wants ~2.7 MB (3.35 TB/s x ~0.8 us of DRAM latency).
//   - grid = SMs x (256-thread blocks resident per SM, from cudaOccupancyMaxActiveBlocksPerMultiprocessor):
//     one wave that walks the arrays with a grid-stride loop; no block waits for a second wave.
//   - float4 needs 16-byte aligned pointers (torch allocations are, at offset 0); a view starting
//     elsewhere takes the scalar loop. The N % 4 floats after the last float4 go one per thread.
//   - 64-bit N, torch's current stream, and a check that a and b have the same length (the seed
//     reads past the end of b when it is shorter).
// version 2 (vector_add_kernel2 / vector_add_launcher2): measured, 1 reached 2867 GB/s (0.94x
//   torch), so this copies torch's own elementwise layout instead of a persistent grid: every block
//   does one contiguous tile of 256 threads x 16 floats = 4096 floats (16 KB per array), thread t
//   loading float4s tile/4 + j x 256 + t for j = 0..3 (coalesced, 512 B per warp instruction), all 8
//   loads before the first add, with streaming hints (__ldcs/__stcs: every byte is touched once).
//   The grid is N / 4096 blocks (65536 at 2^28) instead of one wave walking the whole array: the
//   blocks resident at any moment (32 registers on sm_90 -> 8 per SM, 1056 on 132 SMs, 128 B of
//   loads in flight per thread: 35 MB, ~13x Little's 2.7 MB) cover one contiguous window of each array, so DRAM
//   pages are opened once and read through, where a grid-stride wave scatters each thread's
//   accesses 4 MB apart. 65536 tiles are 62 waves of short blocks, so the partial last wave costs
//   < 1 block time (~1.5%). Only the last tile checks bounds (float4s that fit, then the N % 4
//   floats); a misaligned pointer takes a scalar tile loop (uniform branch). A loop over tiles
//   (start += gridDim.x x 4096) keeps any grid correct; 64-bit indices; same checks as version 1.

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
                x[j] = __ldcs(a4 + q0 + j * VECTOR_ADD_BLOCK2);
                y[j] = __ldcs(b4 + q0 + j * VECTOR_ADD_BLOCK2);
            }
#pragma unroll
            for (int j = 0; j < VECTOR_ADD_VEC2; ++j) {
                __stcs(c4 + q0 + j * VECTOR_ADD_BLOCK2, vector_add_float4(x[j], y[j]));
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

// version 3 (vector_add_kernel3 / vector_add_launcher3): version 2 with plain loads and stores. On the
//   H100 the streaming hints cost the two-input add ~3% (add2.cu's version 4 without them reached
//   3005 GB/s, 0.99x torch, where version 3 with them stayed at 2919 GB/s); with one input
//   (custom_operation, square_matrix) they did not.
__global__ void __launch_bounds__(VECTOR_ADD_BLOCK2) vector_add_kernel3(const float* __restrict__ a,
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
                x[j] = *(a4 + q0 + j * VECTOR_ADD_BLOCK2);
                y[j] = *(b4 + q0 + j * VECTOR_ADD_BLOCK2);
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

torch::Tensor vector_add_launcher3(torch::Tensor& a, torch::Tensor& b) {
    // The seed's checks, with the seed's messages, and version 1's.
    if (a.dim() != 1 || b.dim() != 1) {
        throw std::runtime_error("Input tensor must be one-dimensional");
    }
    if (a.scalar_type() != torch::kFloat32 || b.scalar_type() != torch::kFloat32) {
        throw std::runtime_error("Input tensor must be type of float32");
    }
    TORCH_CHECK(a.size(0) == b.size(0), "vector_add3: a and b differ in length (", a.size(0), " vs ", b.size(0), ")");
    TORCH_CHECK(a.is_cuda() && b.device() == a.device(), "vector_add3: a and b must be on the same CUDA device");
    const c10::DeviceGuard device_guard(a.device());
    const torch::Tensor x = a.contiguous(), y = b.contiguous();  // no copy when they already are
    torch::Tensor c = torch::empty_like(x);
    const int64_t N = x.size(0);
    if (N == 0) return c;
    // One block per tile, capped at the grid's x limit (the kernel's tile loop covers the rest).
    const int blocks = (int)std::min<int64_t>((N + VECTOR_ADD_TILE2 - 1) / VECTOR_ADD_TILE2, 2147483647);
    vector_add_kernel3<<<blocks, VECTOR_ADD_BLOCK2, 0, vector_add_stream1(x)>>>(
        x.data_ptr<float>(), y.data_ptr<float>(), c.data_ptr<float>(), N);
    vector_add_check1(cudaGetLastError());
    return c;
}
