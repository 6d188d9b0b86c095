// scan: out = the inclusive prefix sum of x (out[i] = x[0] + ... + x[i], torch.cumsum(x, 0)), fp32,
// any n. Kernel-only: no torch header, so NVRTC builds it in process.
//
//   k = jitlab.load("kernels/scan.cu")
//   k.scan_kernel1(out, block_sums, x, n, grid=blocks, block=1024)   # version 1, then the sums, then:
//   k.scan_add_kernel(out, offsets, n, 1024, grid=blocks - 1, block=256)
//   k.scan_kernel4(out, status, counter, x, n, grid=-(-n // 8192), block=256)   # version 4: one pass
//     status = torch.zeros(tiles, dtype=torch.int64), counter = torch.zeros(1, dtype=torch.int32)
//   kernels/scan.ref.py holds every driver (run, run2, run3, run4); jitlab run times them against torch.
//
// Napkin math (H100 SXM, ~3 TB/s for a copy): 2^26 floats are 268 MB. torch.cumsum (CUB's single-pass
// scan) reads them once and writes them once, 537 MB: ~0.18 ms at 3 TB/s. Every
// extra pass over n floats costs ~0.09 ms, so the versions are a story of passes: 4n, 4n, 3n, 2n words.
// Measured (H100, 2^26, cold L2): torch.cumsum 0.26 ms; versions 1-4: 0.81, 0.79, 0.29, 0.23 ms.
//
// version 1 (scan_kernel1): Kogge-Stone, 10 shared-memory steps per 1024 floats + a second level, 4n words; wins for n <= 1024.
// version 2 (scan_kernel2): Brent-Kung up-sweep/down-sweep, 2n adds instead of n log n, same 4n words; wins on work, not bytes.
// version 3 (scan_reduce_kernel3, scan_spine_kernel3, scan_kernel3): reduce-then-scan in registers, 3n words; no block waits.
// version 4 (scan_kernel4): single pass with decoupled look-back, 2n words like CUB; the fastest for large n.

#define SCAN_FULL 0xffffffffu

// Inclusive scan across the 32 lanes of a warp: 5 shuffle steps, lane l ends with v_0 + ... + v_l.
__device__ __forceinline__ float scan_warp_inclusive(float v, int lane) {
#pragma unroll
    for (int d = 1; d < 32; d *= 2) {
        const float left = __shfl_up_sync(SCAN_FULL, v, d);
        if (lane >= d) v += left;
    }
    return v;
}

// Sum over the warp, the same value in every lane (xor butterfly: a + b and b + a are the same bits).
__device__ __forceinline__ float scan_warp_sum(float v) {
#pragma unroll
    for (int d = 16; d > 0; d /= 2) {
        v += __shfl_xor_sync(SCAN_FULL, v, d);
    }
    return v;
}

// ---------------------------------------------------------------------------------------------
// version 1: Kogge-Stone, one block per 1024-element tile, then a second level
//
// log2(1024) = 10 steps of ~n adds each (work n log n). The tile sums are scanned the same way
// (recursively: 2^26 -> 65536 -> 64 -> 1) and scan_add_kernel adds them back: the scan reads and
// writes n floats, the add reads and writes them again.

#define SCAN_MAX_BLOCK 1024

// out[i] = the inclusive scan of x within this block's tile of blockDim.x elements;
// block_sums[b] = the tile's total (the last element of its scan).
__global__ void __launch_bounds__(SCAN_MAX_BLOCK) scan_kernel1(float* out, float* block_sums,
                                                               const float* x, long long n) {
    __shared__ float buf[2][SCAN_MAX_BLOCK];
    const int t = threadIdx.x;
    const long long i = (long long)blockIdx.x * blockDim.x + t;
    int cur = 0;
    buf[cur][t] = i < n ? x[i] : 0.0f;  // past the end: 0, the identity of +
    __syncthreads();
    // Step d: every element adds the one d places to its left. In place, thread t could read s[t - d]
    // after thread t - d already added to it in this step (another warp may run ahead): a race.
    // Reading one buffer and writing the other makes each step read only the previous step's values.
    for (int d = 1; d < blockDim.x; d *= 2) {
        float v = buf[cur][t];
        if (t >= d) v += buf[cur][t - d];
        buf[cur ^ 1][t] = v;
        cur ^= 1;
        __syncthreads();  // the next step reads what this one wrote (and overwrites what it read)
    }
    if (i < n) out[i] = buf[cur][t];
    if (t == blockDim.x - 1) block_sums[blockIdx.x] = buf[cur][t];
}

// The second level: tile b >= 1 adds offsets[b - 1], the inclusive scan of the block sums (the total
// of every tile before it). Launched with one block per tile but the first (grid = tiles - 1).
__global__ void scan_add_kernel(float* out, const float* offsets, long long n, int tile) {
    const long long b = (long long)blockIdx.x + 1;
    const float add = offsets[b - 1];
    const long long end = min(n, (b + 1) * tile);
    for (long long i = b * tile + threadIdx.x; i < end; i += blockDim.x) {
        out[i] += add;
    }
}

// ---------------------------------------------------------------------------------------------
// version 2: Brent-Kung, two elements per thread (a 1024-element tile per 512 threads)

#define SCAN_BK_THREADS 512

__global__ void __launch_bounds__(SCAN_BK_THREADS) scan_kernel2(float* out, float* block_sums,
                                                                const float* x, long long n) {
    __shared__ float s[2 * SCAN_BK_THREADS];
    const int t = threadIdx.x;
    const int T = 2 * blockDim.x;  // elements per tile; blockDim.x must be a power of two
    const long long base = (long long)blockIdx.x * T;
    for (int j = t; j < T; j += blockDim.x) {  // elements t and t + blockDim.x: both loads coalesced
        s[j] = base + j < n ? x[base + j] : 0.0f;
    }
    // Up-sweep: at stride d, s[k] for k = 2d - 1, 4d - 1, ... adds s[k - d]; afterwards s[k] holds the
    // sum of the 2d elements ending at k, and s[T - 1] the tile's total. T/2 + T/4 + ... = T - 1 adds.
    for (int d = 1; d < T; d *= 2) {
        __syncthreads();
        const int k = (t + 1) * 2 * d - 1;
        if (k < T) s[k] += s[k - d];
    }
    // Down-sweep: s[k] (k = 2d - 1, 4d - 1, ...) is now a full prefix; hand it on to s[k + d], the end of
    // the next half-block, which so far holds only its own half's sum. Strides T/4, ..., 1: T - log T adds.
    for (int d = T / 4; d > 0; d /= 2) {
        __syncthreads();
        const int k = (t + 1) * 2 * d - 1;
        if (k + d < T) s[k + d] += s[k];
    }
    __syncthreads();
    for (int j = t; j < T; j += blockDim.x) {
        if (base + j < n) out[base + j] = s[j];
    }
    if (t == 0) block_sums[blockIdx.x] = s[T - 1];
}

// ---------------------------------------------------------------------------------------------
// Versions 3 and 4: 8192-float tiles of 256 threads x 32 floats, scanned in registers.
//
// Warp w owns the 1024 consecutive floats [1024 w, 1024 w + 1024) of the tile, as 8 rounds of 32
// float4s: lane l's float4 in round j is float4 256 w + 32 j + l (each round a coalesced 512-byte
// access). A lane scans its float4 serially (3 adds), a shuffle scan over the 32 lanes gives each lane
// what comes before it in the round, and a running carry joins the rounds. The block then needs shared
// memory only for its 8 warp totals: one __syncthreads, where Kogge-Stone needed 10.
//
// Why 8192: measured on the H100 at 2^26, version 4 took ~265 us with 4096-float tiles (6 blocks
// per SM), 229 us with 8192 (64 registers, 4 blocks per SM: 128 KB of loads in flight per SM
// and half as many look-backs), 227 us with 16384. __ldcs/__stcs (evict first) gained ~1%.

#define SCAN_THREADS 256
#define SCAN_WARPS (SCAN_THREADS / 32)
#define SCAN_ROUNDS 8
#define SCAN_TILE (SCAN_THREADS * SCAN_ROUNDS * 4)  // 8192 floats, 32 KB
#define SCAN_MIN_BLOCKS 4  // resident blocks per SM: caps registers at 64

__device__ __forceinline__ bool scan_aligned16(const void* p) {
    return (reinterpret_cast<size_t>(p) & 15) == 0;
}

// Float4 number q of x (floats 4q .. 4q + 3); past n the missing floats read as 0. `vec`: x is
// 16-byte aligned, so a whole float4 is one 128-bit load; otherwise (a view such as x[1:]) four floats.
__device__ __forceinline__ float4 scan_load4(const float* x, long long q, long long n, bool vec) {
    const long long i = 4 * q;
    if (vec && i + 4 <= n) return __ldcs(reinterpret_cast<const float4*>(x) + q);  // read once: evict first
    float4 v;
    v.x = i < n ? x[i] : 0.0f;
    v.y = i + 1 < n ? x[i + 1] : 0.0f;
    v.z = i + 2 < n ? x[i + 2] : 0.0f;
    v.w = i + 3 < n ? x[i + 3] : 0.0f;
    return v;
}

__device__ __forceinline__ void scan_store4(float* out, long long q, long long n, bool vec, float4 v) {
    const long long i = 4 * q;
    if (vec && i + 4 <= n) {
        __stcs(reinterpret_cast<float4*>(out) + q, v);
        return;
    }
    if (i < n) out[i] = v.x;
    if (i + 1 < n) out[i + 1] = v.y;
    if (i + 2 < n) out[i + 2] = v.z;
    if (i + 3 < n) out[i + 3] = v.w;
}

// This thread's float4s of tile `tile` (round j in v[j]).
__device__ __forceinline__ void scan_load_tile(float4 (&v)[SCAN_ROUNDS], const float* x, long long tile,
                                               long long n, bool vec) {
    const long long q0 = tile * (SCAN_TILE / 4) + (threadIdx.x / 32) * (32 * SCAN_ROUNDS) + threadIdx.x % 32;
#pragma unroll
    for (int j = 0; j < SCAN_ROUNDS; ++j) v[j] = scan_load4(x, q0 + 32 * j, n, vec);  // all 8 loads in flight
}

__device__ __forceinline__ void scan_store_tile(float* out, const float4 (&v)[SCAN_ROUNDS], long long tile,
                                                long long n, bool vec) {
    const long long q0 = tile * (SCAN_TILE / 4) + (threadIdx.x / 32) * (32 * SCAN_ROUNDS) + threadIdx.x % 32;
#pragma unroll
    for (int j = 0; j < SCAN_ROUNDS; ++j) scan_store4(out, q0 + 32 * j, n, vec, v[j]);
}

// Turns v into the inclusive scan of the warp's 1024 floats; returns their total (in every lane).
// The rounds' shuffle scans are independent, so they interleave (8 chains of 5 shuffles).
__device__ __forceinline__ float scan_warp_tile(float4 (&v)[SCAN_ROUNDS], int lane) {
    float incl[SCAN_ROUNDS];
#pragma unroll
    for (int j = 0; j < SCAN_ROUNDS; ++j) {
        v[j].y += v[j].x;
        v[j].z += v[j].y;
        v[j].w += v[j].z;
        incl[j] = v[j].w;  // this lane's float4 total
    }
#pragma unroll
    for (int d = 1; d < 32; d *= 2) {
#pragma unroll
        for (int j = 0; j < SCAN_ROUNDS; ++j) {
            const float left = __shfl_up_sync(SCAN_FULL, incl[j], d);
            if (lane >= d) incl[j] += left;
        }
    }
    float carry = 0.0f;  // the warp's earlier rounds
#pragma unroll
    for (int j = 0; j < SCAN_ROUNDS; ++j) {
        const float before = __shfl_up_sync(SCAN_FULL, incl[j], 1);  // lanes to the left, this round
        const float add = carry + (lane == 0 ? 0.0f : before);
        v[j].x += add;
        v[j].y += add;
        v[j].z += add;
        v[j].w += add;
        carry += __shfl_sync(SCAN_FULL, incl[j], 31);
    }
    return carry;
}

__device__ __forceinline__ void scan_add4(float4 (&v)[SCAN_ROUNDS], float add) {
#pragma unroll
    for (int j = 0; j < SCAN_ROUNDS; ++j) {
        v[j].x += add;
        v[j].y += add;
        v[j].z += add;
        v[j].w += add;
    }
}

// ---------------------------------------------------------------------------------------------
// version 3: reduce, scan the tile sums, rescan each tile with its offset (three kernels, 3n words)

// Pass 1: tile_sums[b] = the sum of tile b.
__global__ void __launch_bounds__(SCAN_THREADS, SCAN_MIN_BLOCKS) scan_reduce_kernel3(float* tile_sums, const float* x, long long n) {
    __shared__ float warp_sums[SCAN_WARPS];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    float4 v[SCAN_ROUNDS];
    scan_load_tile(v, x, blockIdx.x, n, scan_aligned16(x));
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < SCAN_ROUNDS; ++j) s += (v[j].x + v[j].y) + (v[j].z + v[j].w);
    s = scan_warp_sum(s);
    if (lane == 0) warp_sums[warp] = s;
    __syncthreads();
    if (threadIdx.x == 0) {
        float total = 0.0f;
        for (int w = 0; w < SCAN_WARPS; ++w) total += warp_sums[w];
        tile_sums[blockIdx.x] = total;
    }
}

// Pass 2, one block of 1024 threads: tile_prefix[b] = tile_sums[0] + ... + tile_sums[b - 1]. Thread t
// takes a run of `per` consecutive sums (8 at n = 2^26): it adds them up, a block scan of those
// totals says what comes before its run, and it walks the run again writing prefixes. 32 KB: noise.
__global__ void __launch_bounds__(1024) scan_spine_kernel3(float* tile_prefix, const float* tile_sums, int tiles) {
    __shared__ float warp_incl[32];
    const int t = threadIdx.x, lane = t % 32, warp = t / 32;
    const int per = (tiles + blockDim.x - 1) / blockDim.x;
    const int lo = min(tiles, t * per), hi = min(tiles, lo + per);
    float s = 0.0f;
    for (int i = lo; i < hi; ++i) s += tile_sums[i];
    const float incl = scan_warp_inclusive(s, lane);
    if (lane == 31) warp_incl[warp] = incl;
    __syncthreads();
    if (warp == 0) {
        const float w = lane < blockDim.x / 32 ? warp_incl[lane] : 0.0f;
        warp_incl[lane] = scan_warp_inclusive(w, lane);  // each lane reads its own slot first: no race
    }
    __syncthreads();
    const float left = __shfl_up_sync(SCAN_FULL, incl, 1);
    float run = (warp > 0 ? warp_incl[warp - 1] : 0.0f) + (lane > 0 ? left : 0.0f);  // exclusive
    for (int i = lo; i < hi; ++i) {
        tile_prefix[i] = run;
        run += tile_sums[i];
    }
}

// Pass 3: scan tile b again, add tile_prefix[b] and the earlier warps' totals, write.
__global__ void __launch_bounds__(SCAN_THREADS, SCAN_MIN_BLOCKS) scan_kernel3(float* out, const float* x, const float* tile_prefix,
                                                             long long n) {
    __shared__ float warp_totals[SCAN_WARPS];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const bool vec = scan_aligned16(x) && scan_aligned16(out);
    float4 v[SCAN_ROUNDS];
    scan_load_tile(v, x, blockIdx.x, n, vec);
    const float total = scan_warp_tile(v, lane);
    if (lane == 0) warp_totals[warp] = total;
    __syncthreads();
    float before = tile_prefix[blockIdx.x];
    for (int w = 0; w < warp; ++w) before += warp_totals[w];
    scan_add4(v, before);
    scan_store_tile(out, v, blockIdx.x, n, vec);
}

// ---------------------------------------------------------------------------------------------
// version 4: one pass, decoupled look-back (Merrill & Garland, "Single-pass Parallel Prefix Scan
// with Decoupled Look-back", 2016: what CUB does)
//
// status[b] is one 64-bit word: flag in the high half (0 = nothing yet, 1 = the tile's own sum,
// 2 = its inclusive prefix, the sum of tiles 0..b), the float's bits in the low half. Flag and value
// are written by one 64-bit store and read by one 64-bit load, so a reader never sees a flag with
// another write's value (a torn read), and no other memory carries anything between blocks: no fence
// is needed to order "value, then flag". The loads and stores are relaxed atomics at GPU scope
// (ld/st.relaxed.gpu): they go to L2, where every SM sees them, never to a stale L1 line, and
// `volatile` + the "memory" clobber keep the compiler from hoisting the load out of the spin loop.
//
// Deadlock: a tile waits for its predecessors, so they must be running. Blocks do not start in
// blockIdx order, so the tile comes from an atomic counter instead: tile b is taken only after tiles
// 0..b-1 were taken by blocks already running, and those publish their sums without waiting.

#define SCAN_FLAG_SUM 1ull
#define SCAN_FLAG_PREFIX 2ull

__device__ __forceinline__ void scan_publish(long long* status, long long tile, unsigned long long flag,
                                             float value) {
    const unsigned long long word = (flag << 32) | __float_as_uint(value);
    asm volatile("st.relaxed.gpu.u64 [%0], %1;" ::"l"(status + tile), "l"(word) : "memory");
}

__device__ __forceinline__ unsigned long long scan_peek(const long long* status, long long tile) {
    unsigned long long word;
    asm volatile("ld.relaxed.gpu.u64 %0, [%1];" : "=l"(word) : "l"(status + tile) : "memory");
    return word;
}

// Run by one whole warp. Publishes this tile's sum, finds the sum of every tile before it, publishes
// the inclusive prefix, and returns the exclusive one (in every lane). The warp looks at 32
// predecessors at once: lane l at tile - 1 - l. Once none of them is empty, it adds up the lanes up to
// the nearest one holding a full prefix; if there is none, all 32 sums, and the window moves 32 back.
__device__ float scan_look_back(long long* status, long long tile, float sum, int lane) {
    if (tile == 0) {
        if (lane == 0) scan_publish(status, 0, SCAN_FLAG_PREFIX, sum);
        return 0.0f;
    }
    if (lane == 0) scan_publish(status, tile, SCAN_FLAG_SUM, sum);  // first, so successors can go on
    float exclusive = 0.0f;
    long long last = tile - 1;  // the nearest predecessor not added yet
    while (true) {
        const long long p = last - lane;
        // Before tile 0 there is nothing: read it as a prefix of 0 (tile 0's own prefix stops us first).
        const unsigned long long word = p >= 0 ? scan_peek(status, p) : SCAN_FLAG_PREFIX << 32;
        const unsigned int flag = (unsigned int)(word >> 32);
        if (__any_sync(SCAN_FULL, flag == 0)) continue;  // someone has not published yet: look again
        const unsigned int prefixes = __ballot_sync(SCAN_FULL, flag == SCAN_FLAG_PREFIX);
        const int stop = prefixes ? __ffs(prefixes) - 1 : 31;  // the nearest full prefix, or the whole window
        const float v = lane <= stop ? __uint_as_float((unsigned int)word) : 0.0f;
        exclusive += scan_warp_sum(v);
        if (prefixes) break;
        last -= 32;
    }
    if (lane == 0) scan_publish(status, tile, SCAN_FLAG_PREFIX, exclusive + sum);
    return exclusive;
}

__global__ void __launch_bounds__(SCAN_THREADS, SCAN_MIN_BLOCKS) scan_kernel4(float* out, long long* status, int* tile_counter,
                                                             const float* x, long long n) {
    __shared__ int s_tile;
    __shared__ float warp_totals[SCAN_WARPS];
    __shared__ float s_prefix;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if (threadIdx.x == 0) s_tile = atomicAdd(tile_counter, 1);  // the tile, in the order blocks start
    __syncthreads();
    const long long tile = s_tile;
    const bool vec = scan_aligned16(x) && scan_aligned16(out);
    float4 v[SCAN_ROUNDS];
    scan_load_tile(v, x, tile, n, vec);
    const float total = scan_warp_tile(v, lane);
    if (lane == 0) warp_totals[warp] = total;
    __syncthreads();
    float before = 0.0f, sum = 0.0f;
    for (int w = 0; w < SCAN_WARPS; ++w) {
        const float t = warp_totals[w];
        if (w < warp) before += t;
        sum += t;
    }
    if (warp == 0) {  // the other 7 warps wait at the barrier below
        const float prefix = scan_look_back(status, tile, sum, lane);
        if (lane == 0) s_prefix = prefix;
    }
    __syncthreads();
    scan_add4(v, s_prefix + before);
    scan_store_tile(out, v, tile, n, vec);
}
