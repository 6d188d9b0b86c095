// add2: c = a + b over n float32s, seed 001's kernel as a kernel-only snippet (no torch header, no binding).
//
//   k = jitlab.load("kernels/add2.cu")
//   k.add2_kernel(c, a, b, n, grid=(n + 1023) // 1024, block=1024)   # version 0, launched yourself
//   k.launch_add2(c, a, b, n)                                         # version 0 through the seed's launcher
//   sms = torch.cuda.get_device_properties(0).multi_processor_count
//   k.add2_kernel1(c, a, b, n, grid=sms * 8, block=256)   # 8 = 2048 threads per SM / 256 (4 on a T4)
//   k.add2_kernel2(c, a, b, n, grid=sms * 4, block=256)
//   k.add2_kernel3(c, a, b, n, grid=max(1, -(-n // 2048)), block=128)   # one block per 2048-float tile
//
// Tensors go in for the pointers (float* <-> float32, CUDA, contiguous); every kernel loops over its
// share, so any grid is correct (kernels/add2.ref.py shrinks the grid for small n).
//
// Napkin math (H100 SXM: 3.35 TB/s, 132 SMs): n = 2^28 reads 2 GiB and writes 1 GiB, 0.96 ms at the peak.
// One FLOP per 12 bytes: only memory matters, and Little's law wants ~2.7 MB of loads in flight.
//
// version 0 (add2_kernel, seed 001): one float per thread per trip; the baseline (4 bytes per load instruction).
// version 1 (add2_kernel1): float4 loads, grid-stride over one resident wave; the simplest of the fast ones.
// version 2 (add2_kernel2): version 1 with four float4s per input in flight; for a GPU where 1 has too few.
// version 3 (add2_kernel3): torch's layout, one tile of 16 floats per thread per block; the fastest, no grid to tune.

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

// ---------------------------------------------------------------------------------------------
// version 1: float4 + grid-stride loop over a grid sized to the machine

// float4 loads need 16-byte aligned addresses; torch's allocator gives 256-byte aligned storage,
// but a slice such as x[1:] starts 4 bytes in.
__device__ __forceinline__ bool add2_aligned16(const void* p) {
    return (reinterpret_cast<size_t>(p) & 15) == 0;
}

__device__ __forceinline__ float4 add2_float4(float4 x, float4 y) {
    return make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
}

// A warp's float4 load moves 512 B (four whole 128-byte lines): 4x fewer instructions than version 0.
// The grid is one full wave (SMs x 8 blocks of 256), so no block waits for a second wave; 8 blocks fit
// only at <= 32 registers: after an edit, check with `jitlab inspect` (or shrink the grid).
// n is 64-bit so that any tensor size works (an int index overflows past 2^31 elements).
__global__ void __launch_bounds__(256) add2_kernel1(float* __restrict__ c,
                                                    const float* __restrict__ a,
                                                    const float* __restrict__ b,
                                                    long long n) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    const long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const bool aligned = add2_aligned16(a) && add2_aligned16(b) && add2_aligned16(c);
    const long long n4 = aligned ? n / 4 : 0;  // whole float4s; none if a pointer is misaligned

    const float4* a4 = reinterpret_cast<const float4*>(a);
    const float4* b4 = reinterpret_cast<const float4*>(b);
    float4* c4 = reinterpret_cast<float4*>(c);
    // One float4 per input per trip, not unrolled: a full wave already has 8.6 MB in flight, and a
    // plain loop keeps the kernel small (20-odd registers), so 8 blocks per SM always fit.
#pragma unroll 1
    for (long long i = tid; i < n4; i += stride) {
        c4[i] = add2_float4(a4[i], b4[i]);
    }
    // The rest, one float per thread: at most 3 floats when aligned, everything when not.
#pragma unroll 1
    for (long long i = 4 * n4 + tid; i < n; i += stride) {
        c[i] = a[i] + b[i];
    }
}

// ---------------------------------------------------------------------------------------------
// version 2: version 1 + four float4 per input in flight per thread + streaming cache hints

#define ADD2_UNROLL 4

// Four times the bytes in flight per thread, so half the threads suffice: the grid is SMs x 4, and
// __launch_bounds__(256, 4) caps registers at 64 so that those 4 blocks are always resident.
// __ldcs/__stcs (evict-first): every byte is touched once, nothing is worth keeping in L2.
__global__ void __launch_bounds__(256, 4) add2_kernel2(float* __restrict__ c,
                                                       const float* __restrict__ a,
                                                       const float* __restrict__ b,
                                                       long long n) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    const long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const bool aligned = add2_aligned16(a) && add2_aligned16(b) && add2_aligned16(c);
    const long long n4 = aligned ? n / 4 : 0;

    const float4* a4 = reinterpret_cast<const float4*>(a);
    const float4* b4 = reinterpret_cast<const float4*>(b);
    float4* c4 = reinterpret_cast<float4*>(c);
    long long i = tid;
    // Whole groups: this thread's float4s i, i + stride, i + 2 stride, i + 3 stride. Each of the four
    // loads is coalesced across the warp (consecutive threads, consecutive float4s); all eight loads
    // are issued before the first add, so one thread waits for one DRAM round trip, not four.
    for (; i + (ADD2_UNROLL - 1) * stride < n4; i += ADD2_UNROLL * stride) {
        float4 x[ADD2_UNROLL], y[ADD2_UNROLL];
#pragma unroll
        for (int j = 0; j < ADD2_UNROLL; ++j) {
            x[j] = __ldcs(a4 + i + j * stride);
            y[j] = __ldcs(b4 + i + j * stride);
        }
#pragma unroll
        for (int j = 0; j < ADD2_UNROLL; ++j) {
            __stcs(c4 + i + j * stride, add2_float4(x[j], y[j]));
        }
    }
#pragma unroll 1
    for (; i < n4; i += stride) {  // fewer than ADD2_UNROLL float4s left for this thread
        __stcs(c4 + i, add2_float4(__ldcs(a4 + i), __ldcs(b4 + i)));
    }
#pragma unroll 1
    for (long long k = 4 * n4 + tid; k < n; k += stride) {
        c[k] = a[k] + b[k];
    }
}

// ---------------------------------------------------------------------------------------------
// version 3: torch-style tiles, one tile of 16 floats per thread per block, a grid of n / tile blocks

// Floats per thread per tile (4 float4s per input): the tile is blockDim.x x 16 floats, 4096 at 256.
#define ADD2_TILE_PER_THREAD3 16

// Why tiles: the blocks resident at any moment cover one contiguous window of each array, so DRAM
// pages are opened once and read through (a grid-stride wave scatters each thread's accesses 4 MB
// apart), and the scheduler hands out tiles as blocks finish: at 2^28, ~62 waves, so the partial last
// wave costs < 2%. __launch_bounds__(256, 8): at most 32 registers, 8 blocks per SM. Plain loads, not
// version 2's __ldcs/__stcs hints, and 128-thread blocks (torch's choice): on the H100 that measured
// 0.99x torch against 0.96x with the hints and 256 threads (docs/benchmarks.md).

__global__ void __launch_bounds__(256, 8) add2_kernel3(float* __restrict__ c,
                                                    const float* __restrict__ a,
                                                    const float* __restrict__ b,
                                                    long long n) {
    const bool aligned = add2_aligned16(a) && add2_aligned16(b) && add2_aligned16(c);
    const long long tile = (long long)blockDim.x * ADD2_TILE_PER_THREAD3;  // floats per tile
    const float4* a4 = reinterpret_cast<const float4*>(a);
    const float4* b4 = reinterpret_cast<const float4*>(b);
    float4* c4 = reinterpret_cast<float4*>(c);
    // Normally one trip (grid = number of tiles); the loop only matters if the grid is smaller.
    for (long long start = (long long)blockIdx.x * tile; start < n; start += (long long)gridDim.x * tile) {
        if (aligned && start + tile <= n) {
            // A whole tile: float4 q = start / 4 + j * blockDim.x + threadIdx.x, each load coalesced
            // across the warp (512 B per instruction); all eight loads before the first add.
            const long long q0 = (start >> 2) + threadIdx.x;
            float4 x[4], y[4];
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                x[j] = a4[q0 + (long long)j * blockDim.x];
                y[j] = b4[q0 + (long long)j * blockDim.x];
            }
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                c4[q0 + (long long)j * blockDim.x] = add2_float4(x[j], y[j]);
            }
        } else if (aligned) {
            // The last, partial tile: whole float4s while they fit, then the n % 4 floats one by one.
#pragma unroll 1
            for (int j = 0; j < 4; ++j) {
                const long long q = (start >> 2) + (long long)j * blockDim.x + threadIdx.x;
                if (4 * q + 4 <= n) {
                    c4[q] = add2_float4(a4[q], b4[q]);
                } else {
                    for (long long k = 4 * q; k < n && k < 4 * q + 4; ++k) c[k] = a[k] + b[k];
                }
            }
        } else {
            // A misaligned pointer (uniform branch): the same tile, one float at a time, coalesced.
#pragma unroll 4
            for (int j = 0; j < ADD2_TILE_PER_THREAD3; ++j) {
                const long long k = start + (long long)j * blockDim.x + threadIdx.x;
                if (k < n) c[k] = a[k] + b[k];
            }
        }
    }
}
