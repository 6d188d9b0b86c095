// histogram: hist[b] = how many bytes of x equal b, 256 bins, int64 counts
// (torch.bincount(x, minlength=256) for a uint8 tensor x). Kernel-only: NVRTC builds it in process.
//
//   k = jitlab.load("kernels/histogram.cu")
//   hist = torch.zeros(256, dtype=torch.int64, device="cuda")   # the kernels add into it: zero it first
//   sms = torch.cuda.get_device_properties(0).multi_processor_count
//   k.histogram_kernel3(hist, x, n, grid=sms * 8, block=256)   # every version: any grid, block <= 256
//
// Napkin math (H100 SXM): 2^26 bytes are 67 MB, ~22 us at ~3 TB/s. Per SM that is 508 K increments;
// one shared-memory atomic instruction does a warp's 32, in one pass if the lanes hit 32 different
// banks. Random bytes put 3-4 lanes on the busiest of 32 banks (birthday problem), so 3-4 passes: ~16 K
// instructions x 3.5 per SM, ~33 us at 1.7 GHz. So version 3 is bound by shared atomics, not DRAM
// (measured: 44 us, 1.5 TB/s). torch.bincount (~440 us) reads x three times (min, max, then the
// histogram) and waits for the first two on the host.
// Measured (H100, 2^26 random bytes, cold L2): torch.bincount 0.44 ms; versions 1-3: 10.7, 0.118, 0.045 ms.
//
// version 1 (histogram_kernel1): one global atomicAdd per byte; same-bin increments queue in L2. Wins for tiny n.
// version 2 (histogram_kernel2): privatized: per-block bins in shared memory, then 256 global atomics per block.
// version 3 (histogram_kernel3): version 2 coarsened: uint4 loads, a sub-histogram per warp, 16-byte runs in one atomic. The one to use.

#define HIST_BINS 256

// ---------------------------------------------------------------------------------------------
// version 1: global atomics

// hist is int64 (torch.bincount's dtype); atomicAdd has an unsigned long long overload, and adding
// 1 to the same 64 bits gives the same result in two's complement.
__global__ void histogram_kernel1(long long* hist, const unsigned char* x, long long n) {
    unsigned long long* h = reinterpret_cast<unsigned long long*>(hist);
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        atomicAdd(h + x[i], 1ull);
    }
}

// ---------------------------------------------------------------------------------------------
// version 2: a private histogram per block in shared memory

__global__ void histogram_kernel2(long long* hist, const unsigned char* x, long long n) {
    __shared__ unsigned int bins[HIST_BINS];
    for (int b = threadIdx.x; b < HIST_BINS; b += blockDim.x) {
        bins[b] = 0;  // shared memory starts with whatever the last block on this SM left there
    }
    __syncthreads();  // every bin is zero before anyone counts
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        atomicAdd(&bins[x[i]], 1u);
    }
    __syncthreads();  // every count is in before the bins are read
    unsigned long long* h = reinterpret_cast<unsigned long long*>(hist);
    for (int b = threadIdx.x; b < HIST_BINS; b += blockDim.x) {
        if (bins[b]) atomicAdd(h + b, (unsigned long long)bins[b]);
    }
}

// ---------------------------------------------------------------------------------------------
// version 3: coarsened: uint4 loads, a sub-histogram per warp, runs of equal bytes
//
// 16 bytes per load (two loads in flight per thread) cut the load instructions 16x. One sub-histogram
// per warp (8 KB per block) means lanes only ever wait for lanes of their own warp on a bin. And when
// all 32 lanes hit one bin (skewed data, flat image regions, padding), a run of 16 equal bytes is one
// atomic of 16 instead of 16 atomics of 1.

#define HIST_THREADS 256
#define HIST_WARPS (HIST_THREADS / 32)

__device__ __forceinline__ void hist_count4(unsigned int* bins, unsigned int w) {
    atomicAdd(bins + (w & 0xffu), 1u);
    atomicAdd(bins + ((w >> 8) & 0xffu), 1u);
    atomicAdd(bins + ((w >> 16) & 0xffu), 1u);
    atomicAdd(bins + (w >> 24), 1u);
}

__device__ __forceinline__ void hist_count16(unsigned int* bins, uint4 v) {
    // 16 copies of one byte? (v.x's low byte times 0x01010101 repeats it in all four bytes.) A few
    // integer ops; for random data the branch is never taken, for a run it saves 15 atomics.
    const unsigned int rep = (v.x & 0xffu) * 0x01010101u;
    if (v.x == rep && v.y == rep && v.z == rep && v.w == rep) {
        atomicAdd(bins + (rep & 0xffu), 16u);
        return;
    }
    hist_count4(bins, v.x);
    hist_count4(bins, v.y);
    hist_count4(bins, v.z);
    hist_count4(bins, v.w);
}

__global__ void __launch_bounds__(HIST_THREADS) histogram_kernel3(long long* hist, const unsigned char* x,
                                                                  long long n) {
    __shared__ unsigned int sub[HIST_WARPS][HIST_BINS];  // 8 KB: one histogram per warp
    for (int i = threadIdx.x; i < HIST_WARPS * HIST_BINS; i += blockDim.x) {
        (&sub[0][0])[i] = 0;
    }
    __syncthreads();
    unsigned int* bins = sub[threadIdx.x / 32];
    const long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const long long stride = (long long)gridDim.x * blockDim.x;
    // The bytes before the first 16-byte boundary one at a time (none for a fresh torch tensor,
    // up to 15 for a view such as x[3:]), then whole uint4s, then the last n % 16 bytes one at a time.
    const long long head = min(n, (long long)((16 - (reinterpret_cast<size_t>(x) & 15)) & 15));
    for (long long i = tid; i < head; i += stride) {
        atomicAdd(bins + x[i], 1u);
    }
    const uint4* x16 = reinterpret_cast<const uint4*>(x + head);
    const long long n16 = (n - head) / 16;
    long long i = tid;
    for (; i + stride < n16; i += 2 * stride) {  // two independent 16-byte loads before any counting
        const uint4 a = x16[i];
        const uint4 b = x16[i + stride];
        hist_count16(bins, a);
        hist_count16(bins, b);
    }
    if (i < n16) {
        hist_count16(bins, x16[i]);
    }
    for (long long k = head + 16 * n16 + tid; k < n; k += stride) {
        atomicAdd(bins + x[k], 1u);
    }
    __syncthreads();
    // Thread b adds bin b of the 8 sub-histograms (column reads: the 8 rows are 1 KB apart, so each
    // read is one bank per lane, no conflicts) and makes one global atomic per bin per block.
    unsigned long long* h = reinterpret_cast<unsigned long long*>(hist);
    for (int b = threadIdx.x; b < HIST_BINS; b += blockDim.x) {
        unsigned long long c = 0;
#pragma unroll
        for (int w = 0; w < HIST_WARPS; ++w) c += sub[w][b];
        if (c) atomicAdd(h + b, c);
    }
}
