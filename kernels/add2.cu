// add2: c = a + b, seed 001's kernel as a kernel-only snippet (no torch header, no binding file).
//
//   k = jitlab.load("kernels/add2.cu")
//   k.add2_kernel(c, a, b, n, grid=(n + 1023) // 1024, block=1024)   # launch the kernel yourself
//   k.launch_add2(c, a, b, n)                                         # or call the seed's launcher
//   sms = torch.cuda.get_device_properties(0).multi_processor_count
//   k.add2_kernel1(c, a, b, n, grid=sms * 8, block=256)   # version 1; 8 = 2048 threads per SM / 256 (4 on a T4)
//   k.add2_kernel2(c, a, b, n, grid=sms * 4, block=256)   # version 2
//   k.add2_kernel3(c, a, b, n, grid=max(1, -(-n // 4096)), block=256)   # version 3: one block per tile
//
// Tensors go in for the pointers (float* <-> float32, CUDA, contiguous); the grid-stride loops make
// any grid size correct (kernels/add2.ref.py shrinks the grid for small n).
//
// Napkin math (H100 SXM: 3.35 TB/s HBM3, 132 SMs, 2048 threads per SM). At n = 2^28 floats the op
// reads 2 x 1 GiB and writes 1 GiB: 3.2 GB, so 0.96 ms at the peak; torch's own add runs at about
// 2.96 TB/s (1.09 ms). An add does 1 FLOP per 12 bytes, so only the memory system matters: the
// kernel has to keep enough loads in flight (Little's law: 3.35 TB/s x ~0.8 us of DRAM latency is
// ~2.7 MB) while spending as few instructions as possible per byte.
//
// version 0 (add2_kernel, seed 001): one float per thread per iteration, 1024-thread blocks, a grid
//   of n / 1024 blocks. Coalesced, but every 4-byte load is its own instruction with its own address
//   math: a warp moves 128 B per load instruction.
// version 1 (add2_kernel1): float4. One 16-byte load (LDG.128) brings 4 floats, so a warp moves 512 B
//   (four whole 128-byte lines) per instruction: 4x fewer load/store/index instructions than version 0.
//   The grid is sized to the machine, not to n: SMs x 8 blocks of 256 = one full wave of 2048 threads
//   per SM (the loop is kept rolled, so the kernel needs 30 registers on sm_90, allocated as 32, and
//   8 blocks fit: 8 x 256 x 32 = 64K registers, the whole file), and each thread walks the array with a grid-stride loop (at 2^28:
//   2^26 float4 / 270K threads = 248 trips). In flight: 270K threads x 2 loads x 16 B = 8.6 MB, 3x
//   what Little's law asks for. A persistent grid also means no block launches after the first wave
//   and no partial last wave. (If an edit pushes it past 32 registers, fewer blocks fit and the last
//   ones would run as a lonely second wave: check `jitlab build --compile-only` and shrink the grid.)
//   The float4 part needs 16-byte aligned pointers (torch allocations are, at storage offset 0);
//   a view that starts elsewhere falls back to the scalar loop (a uniform branch, checked once).
//   The n % 4 floats after the last whole float4 are done by the first threads, one each.
// version 2 (add2_kernel2): version 1 with four float4 per input per trip, all eight loads issued
//   before the first add (checked in the SASS: 8 LDG.E.EF.128 back to back), so 128 B in flight per
//   thread and half the threads suffice: the grid is SMs x 4. Plus streaming cache hints
//   (__ldcs/__stcs, "evict first"): every byte is touched once, so there is nothing worth keeping in
//   the 50 MB L2. __launch_bounds__(256, 4) caps registers at 64 so that 4 blocks per SM are always
//   resident (54 registers on sm_90), whatever the compiler does.
// Which wins between 1 and 2 is for the benchmark to say; both should be within a few percent of
// torch's add, which does the same float4 work.
// version 3 (add2_kernel3): measured, 1 reached only 2900 GB/s against torch's ~3050 (0.95x), so
//   this copies torch's own elementwise layout instead of a persistent grid: every block does one
//   contiguous tile of 256 threads x 16 floats = 4096 floats (16 KB per array), thread t loading
//   float4s tile/4 + j x 256 + t for j = 0..3 (each load coalesced, 512 B per warp instruction),
//   all 8 loads before the first add, __ldcs/__stcs as in 2. The grid is n / 4096 blocks (65536 at
//   2^28) instead of one wave walking the whole array: the blocks resident at any moment
//   (__launch_bounds__(256, 8) holds it to 32 registers on sm_90, no spills, 40 without: 8 blocks
//   per SM, 1056 on 132 SMs; the 8 loads still all go out before the first store, ptxas reusing
//   registers so ~4-6 are in flight per thread, >= 17 MB machine-wide, 6x Little's 2.7 MB) cover
//   one contiguous ~17 MB window of each array, so DRAM pages are opened once and read
//   through, where a grid-stride wave scatters each thread's accesses 4 MB apart and the waves
//   drift. 65536 / 1056 = 62 waves of ~17 us blocks, so the partial last wave costs < 1 block time
//   (~1.5%), and the block scheduler hands out new tiles as old ones finish. Only the last tile
//   checks bounds (float4s that fit, then the n % 4 floats); a misaligned pointer takes a scalar
//   tile loop (uniform branch). The tile loop (start += gridDim.x x tile) keeps any grid correct,
//   and all indices are 64-bit; the tile follows blockDim.x (at most 256, the launch bound).

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
                x[j] = __ldcs(a4 + q0 + (long long)j * blockDim.x);
                y[j] = __ldcs(b4 + q0 + (long long)j * blockDim.x);
            }
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                __stcs(c4 + q0 + (long long)j * blockDim.x, add2_float4(x[j], y[j]));
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

// version 4 (add2_kernel4): version 3 with plain loads and stores instead of the streaming
//   (evict-first) hints, to measure whether the hints help the two-input case; launched with
//   128-thread blocks (2048-float tiles), torch's own choice for its vectorized elementwise kernels.
__global__ void __launch_bounds__(256, 8) add2_kernel4(float* __restrict__ c,
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
                x[j] = *(a4 + q0 + (long long)j * blockDim.x);
                y[j] = *(b4 + q0 + (long long)j * blockDim.x);
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
