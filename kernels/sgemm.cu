// sgemm: C = A @ B in fp32 on the CUDA cores (no tensor cores), row-major: A is M x K, B is K x N,
// C is M x N. Every version is right for any M, N, K (partial tiles are zero-filled or guarded).
//
//   k = jitlab.load("kernels/sgemm.cu")
//   k.sgemm_kernel6(C, A, B, M, N, K, grid=(cdiv(N, 128), cdiv(M, 128)), block=256)
//   (every version's launch: run1 .. run6 in kernels/sgemm.ref.py; cdiv(a, b) = (a + b - 1) // b)
//
// Napkin math at M = N = K = 4096 (H100 SXM: 67 TFLOP/s fp32 FMA, 3.35 TB/s): 2 M N K = 137 GFLOP,
// 2.1 ms at the peak; A and B read once and C written once are 201 MB, 0.06 ms. So a matmul can be
// compute bound by 30x, but only if each element fetched from DRAM is used many times on chip:
// an FMA that loads both operands from memory needs 8 bytes per 2 FLOP, 0.25 FLOP/byte, and would
// run at 0.8 TFLOP/s at best. Every version below raises the reuse per byte fetched.
//
// version 1 (sgemm_kernel1): naive, one thread per element of C, threadIdx.x along M (uncoalesced). Never wins.
// version 2 (sgemm_kernel2): threadIdx.x along N: B read coalesced, A broadcast; 12x version 1. The simplest right layout.
// version 3 (sgemm_kernel3): 32 x 32 tiles in shared memory, each float fetched used 32 times. Small matrices.
// version 4 (sgemm_kernel4): 128 x 128 block tiles, 8 x 8 outputs per thread in registers: 16 shared loads per 64 FMAs.
// version 5 (sgemm_kernel5): + float4 global loads, A transposed in shared memory: 4 LDS.128 per 64 FMAs.
// version 6 (sgemm_kernel6): + warp tiling (conflict-free LDS.128) and double-buffered shared memory. The one to use.
//
// Measured on an H100 at 4096^3 (cuBLAS fp32 2.66 ms, 52 TFLOP/s): 276, 23.5, 16.2, 5.0, 4.1, 3.3 ms for
// versions 1-6; version 6 runs 42 TFLOP/s, 0.81x cuBLAS. Versions 5 and 6 take float4 loads when K and
// N are multiples of 4 and the pointers 16-byte aligned (a uniform branch), scalar guarded ones otherwise.

// ---------------------------------------------------------------------------------------------
// version 1: naive, threadIdx.x along M (uncoalesced)

// size_t offsets: row * K overflows an int past 2^31 elements.
__global__ void sgemm_kernel1(float* C, const float* A, const float* B, int M, int N, int K) {
    const int row = blockIdx.x * blockDim.x + threadIdx.x;  // neighbours in a warp: neighbouring rows
    const int col = blockIdx.y * blockDim.y + threadIdx.y;
    if (row < M && col < N) {
        float acc = 0.0f;
        for (int k = 0; k < K; ++k) {
            acc += A[(size_t)row * K + k] * B[(size_t)k * N + col];  // A: 32 rows K floats apart
        }
        C[(size_t)row * N + col] = acc;
    }
}

// ---------------------------------------------------------------------------------------------
// version 2: threadIdx.x along N (coalesced)

__global__ void sgemm_kernel2(float* C, const float* A, const float* B, int M, int N, int K) {
    const int row = blockIdx.y * blockDim.y + threadIdx.y;
    const int col = blockIdx.x * blockDim.x + threadIdx.x;  // neighbours in a warp: neighbouring columns
    if (row < M && col < N) {
        float acc = 0.0f;
        for (int k = 0; k < K; ++k) {
            acc += A[(size_t)row * K + k] * B[(size_t)k * N + col];  // A: one float for the warp; B: one line
        }
        C[(size_t)row * N + col] = acc;
    }
}

// ---------------------------------------------------------------------------------------------
// version 3: shared-memory tiles

#define SGEMM3_TILE 32  // the block is TILE x TILE threads: 1024

__global__ void __launch_bounds__(SGEMM3_TILE * SGEMM3_TILE) sgemm_kernel3(float* C, const float* A, const float* B,
                                                                         int M, int N, int K) {
    __shared__ float As[SGEMM3_TILE][SGEMM3_TILE];
    __shared__ float Bs[SGEMM3_TILE][SGEMM3_TILE];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row = blockIdx.y * SGEMM3_TILE + ty;
    const int col = blockIdx.x * SGEMM3_TILE + tx;
    float acc = 0.0f;
    for (int t = 0; t < K; t += SGEMM3_TILE) {
        // Each thread brings one float of each tile (coalesced along tx); zeros past the edges, so
        // the loop below needs no bounds checks.
        As[ty][tx] = (row < M && t + tx < K) ? A[(size_t)row * K + t + tx] : 0.0f;
        Bs[ty][tx] = (t + ty < K && col < N) ? B[(size_t)(t + ty) * N + col] : 0.0f;
        __syncthreads();  // the tiles are complete before anyone reads them
#pragma unroll
        for (int k = 0; k < SGEMM3_TILE; ++k) {
            acc += As[ty][k] * Bs[k][tx];  // As: one address per warp (broadcast); Bs: 32 banks
        }
        __syncthreads();  // everyone is done with these tiles before the next loads overwrite them
    }
    if (row < M && col < N) {
        C[(size_t)row * N + col] = acc;
    }
}

// ---------------------------------------------------------------------------------------------
// version 4: 2-D register tiling, 128 x 128 block tile, 8 x 8 outputs per thread

#define SGEMM_BM 128
#define SGEMM_BN 128
#define SGEMM_BK 8
#define SGEMM_TM 8  // outputs per thread along M
#define SGEMM_TN 8  // and along N: 64 accumulators in registers
#define SGEMM_THREADS (SGEMM_BM * SGEMM_BN / (SGEMM_TM * SGEMM_TN))  // 256

// 64 accumulators + 16 operands + addresses: __launch_bounds__(256, 2) caps the registers at 128,
// so 2 blocks (16 warps) share an SM.
__global__ void __launch_bounds__(SGEMM_THREADS, 2) sgemm_kernel4(float* C, const float* A, const float* B,
                                                                  int M, int N, int K) {
    __shared__ float As[SGEMM_BM * SGEMM_BK];  // [BM][BK], as in A
    __shared__ float Bs[SGEMM_BK * SGEMM_BN];  // [BK][BN]
    const int tid = threadIdx.x;
    const int thread_row = tid / (SGEMM_BN / SGEMM_TN);  // 0..15: rows thread_row * 8 .. + 7
    const int thread_col = tid % (SGEMM_BN / SGEMM_TN);  // 0..15: cols thread_col * 8 .. + 7
    const int row0 = blockIdx.y * SGEMM_BM, col0 = blockIdx.x * SGEMM_BN;

    float acc[SGEMM_TM][SGEMM_TN] = {};
    float a_frag[SGEMM_TM], b_frag[SGEMM_TN];
    for (int t = 0; t < K; t += SGEMM_BK) {
        // 1024 floats of each tile, 4 per thread; zeros past the edges.
#pragma unroll
        for (int i = 0; i < SGEMM_BM * SGEMM_BK / SGEMM_THREADS; ++i) {
            const int e = tid + i * SGEMM_THREADS;
            const int r = e / SGEMM_BK, c = e % SGEMM_BK;
            As[e] = (row0 + r < M && t + c < K) ? A[(size_t)(row0 + r) * K + t + c] : 0.0f;
        }
#pragma unroll
        for (int i = 0; i < SGEMM_BK * SGEMM_BN / SGEMM_THREADS; ++i) {
            const int e = tid + i * SGEMM_THREADS;
            const int r = e / SGEMM_BN, c = e % SGEMM_BN;
            Bs[e] = (t + r < K && col0 + c < N) ? B[(size_t)(t + r) * N + col0 + c] : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int d = 0; d < SGEMM_BK; ++d) {
            // A column of 8 from As (strided: one float per load) and a row of 8 from Bs, then
            // their outer product: 64 FMAs for 16 shared loads.
#pragma unroll
            for (int i = 0; i < SGEMM_TM; ++i) a_frag[i] = As[(thread_row * SGEMM_TM + i) * SGEMM_BK + d];
#pragma unroll
            for (int j = 0; j < SGEMM_TN; ++j) b_frag[j] = Bs[d * SGEMM_BN + thread_col * SGEMM_TN + j];
#pragma unroll
            for (int i = 0; i < SGEMM_TM; ++i) {
#pragma unroll
                for (int j = 0; j < SGEMM_TN; ++j) acc[i][j] += a_frag[i] * b_frag[j];
            }
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < SGEMM_TM; ++i) {
        const int r = row0 + thread_row * SGEMM_TM + i;
#pragma unroll
        for (int j = 0; j < SGEMM_TN; ++j) {
            const int c = col0 + thread_col * SGEMM_TN + j;
            if (r < M && c < N) C[(size_t)r * N + c] = acc[i][j];
        }
    }
}

// ---------------------------------------------------------------------------------------------
// shared by versions 5 and 6: four consecutive floats of a row, zero where the row ends

// `valid` is how many of p[0..3] exist (<= 0: none). On the vector path valid is 0 or >= 4, since
// K and N are multiples of 4 there, and p is 16-byte aligned: one LDG.128.
__device__ __forceinline__ float4 sgemm_load4(const float* p, int valid, bool vec) {
    if (vec) {
        return valid > 0 ? *reinterpret_cast<const float4*>(p) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
    return make_float4(valid > 0 ? p[0] : 0.0f, valid > 1 ? p[1] : 0.0f, valid > 2 ? p[2] : 0.0f,
                       valid > 3 ? p[3] : 0.0f);
}

// Four outputs of a row: one STG.128 on the vector path (N % 4 == 0), else up to four guarded stores.
__device__ __forceinline__ void sgemm_store4(float* p, float4 v, int valid, bool vec) {
    if (vec) {
        if (valid > 0) *reinterpret_cast<float4*>(p) = v;
        return;
    }
    if (valid > 0) p[0] = v.x;
    if (valid > 1) p[1] = v.y;
    if (valid > 2) p[2] = v.z;
    if (valid > 3) p[3] = v.w;
}

__device__ __forceinline__ bool sgemm_vector_path(const float* C, const float* A, const float* B, int N, int K) {
    const size_t bits = reinterpret_cast<size_t>(A) | reinterpret_cast<size_t>(B) | reinterpret_cast<size_t>(C);
    return (bits & 15) == 0 && K % 4 == 0 && N % 4 == 0;
}

// ---------------------------------------------------------------------------------------------
// version 5: version 4 + float4 global loads + A transposed in shared memory

__global__ void __launch_bounds__(SGEMM_THREADS, 2) sgemm_kernel5(float* C, const float* A, const float* B,
                                                                  int M, int N, int K) {
    __shared__ __align__(16) float As[SGEMM_BK * SGEMM_BM];  // [BK][BM]: A's tile transposed
    __shared__ __align__(16) float Bs[SGEMM_BK * SGEMM_BN];  // [BK][BN]
    const int tid = threadIdx.x;
    const int thread_row = tid / (SGEMM_BN / SGEMM_TN);
    const int thread_col = tid % (SGEMM_BN / SGEMM_TN);
    const int row0 = blockIdx.y * SGEMM_BM, col0 = blockIdx.x * SGEMM_BN;
    const bool vec = sgemm_vector_path(C, A, B, N, K);
    // Each tile is 128 x 8 = 256 float4s: one per thread. A: row tid / 2, k (tid % 2) * 4;
    // B: k tid / 32, col (tid % 32) * 4 (a warp reads 512 contiguous bytes of a row of B).
    const int a_r = tid / 2, a_c = (tid % 2) * 4;
    const int b_r = tid / 32, b_c = (tid % 32) * 4;

    float acc[SGEMM_TM][SGEMM_TN] = {};
    for (int t = 0; t < K; t += SGEMM_BK) {
        const float4 a = sgemm_load4(A + (size_t)(row0 + a_r) * K + t + a_c, row0 + a_r < M ? K - t - a_c : 0, vec);
        const float4 b = sgemm_load4(B + (size_t)(t + b_r) * N + col0 + b_c, t + b_r < K ? N - col0 - b_c : 0, vec);
        // Transposed: the 4 k's of this row of A go to 4 rows of As, so that below a thread's 8 rows
        // of one k are contiguous (two float4 loads instead of eight scalar ones).
        As[(a_c + 0) * SGEMM_BM + a_r] = a.x;
        As[(a_c + 1) * SGEMM_BM + a_r] = a.y;
        As[(a_c + 2) * SGEMM_BM + a_r] = a.z;
        As[(a_c + 3) * SGEMM_BM + a_r] = a.w;
        *reinterpret_cast<float4*>(&Bs[b_r * SGEMM_BN + b_c]) = b;
        __syncthreads();
#pragma unroll
        for (int d = 0; d < SGEMM_BK; ++d) {
            float a_frag[SGEMM_TM], b_frag[SGEMM_TN];
#pragma unroll
            for (int i = 0; i < SGEMM_TM; i += 4) {
                const float4 v = *reinterpret_cast<const float4*>(&As[d * SGEMM_BM + thread_row * SGEMM_TM + i]);
                a_frag[i] = v.x, a_frag[i + 1] = v.y, a_frag[i + 2] = v.z, a_frag[i + 3] = v.w;
            }
#pragma unroll
            for (int j = 0; j < SGEMM_TN; j += 4) {
                const float4 v = *reinterpret_cast<const float4*>(&Bs[d * SGEMM_BN + thread_col * SGEMM_TN + j]);
                b_frag[j] = v.x, b_frag[j + 1] = v.y, b_frag[j + 2] = v.z, b_frag[j + 3] = v.w;
            }
#pragma unroll
            for (int i = 0; i < SGEMM_TM; ++i) {
#pragma unroll
                for (int j = 0; j < SGEMM_TN; ++j) acc[i][j] += a_frag[i] * b_frag[j];
            }
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < SGEMM_TM; ++i) {
        const int r = row0 + thread_row * SGEMM_TM + i;
#pragma unroll
        for (int j = 0; j < SGEMM_TN; j += 4) {
            const int c = col0 + thread_col * SGEMM_TN + j;
            sgemm_store4(C + (size_t)r * N + c, make_float4(acc[i][j], acc[i][j + 1], acc[i][j + 2], acc[i][j + 3]),
                         r < M ? N - c : 0, vec);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// version 6: warp tiling + double-buffered shared memory

// As rows padded by 4 floats: the transposed stores of one warp (16 rows of A, k and k + 4) then
// hit 32 different banks instead of 16 twice; 132 floats keep each row 16-byte aligned.
#define SGEMM6_LDA (SGEMM_BM + 4)
#ifndef SGEMM6_BK
#define SGEMM6_BK 8  // -D SGEMM6_BK=16 halves the barriers: 0.6% faster on the H100, but 56 B of spills
#endif
#define SGEMM6_A4 (SGEMM_BM * SGEMM6_BK / 4 / SGEMM_THREADS)  // float4s of A per thread per tile
#define SGEMM6_B4 (SGEMM6_BK * SGEMM_BN / 4 / SGEMM_THREADS)  // and of B

__global__ void __launch_bounds__(SGEMM_THREADS, 2) sgemm_kernel6(float* C, const float* A, const float* B,
                                                                  int M, int N, int K) {
    __shared__ __align__(16) float As[2][SGEMM6_BK * SGEMM6_LDA];  // two buffers: [BK][BM + 4]
    __shared__ __align__(16) float Bs[2][SGEMM6_BK * SGEMM_BN];    // [BK][BN]
    const int tid = threadIdx.x;
    // 8 warps as 4 x 2 warp tiles of 32 rows x 64 cols. In a warp, lane = 8 * lane_row + lane_col, and
    // a lane owns rows {lane_row * 4 + 0..3, + 16} x cols {lane_col * 4 + 0..3, + 32} of the warp tile:
    // per k, its 4 float4 loads touch 4 (A) and 8 (B) distinct float4s per warp, contiguous, so every
    // LDS.128 is one conflict-free access, and the 32 lanes' outputs tile the warp tile exactly.
    const int warp = tid / 32, lane = tid % 32;
    const int wm = (warp / 2) * 32 + (lane / 8) * 4;  // first row in the block tile
    const int wn = (warp % 2) * 64 + (lane % 8) * 4;  // first col
    const int row0 = blockIdx.y * SGEMM_BM, col0 = blockIdx.x * SGEMM_BN;
    const bool vec = sgemm_vector_path(C, A, B, N, K);
    // Loads: float4 number id = tid + i * 256 of a tile. A: row id / (BK / 4), k (id % (BK / 4)) * 4;
    // B: k id / 32, col (id % 32) * 4 (a warp reads 512 contiguous bytes of a row of B).
    int a_r[SGEMM6_A4], a_c[SGEMM6_A4], b_r[SGEMM6_B4], b_c[SGEMM6_B4];
#pragma unroll
    for (int i = 0; i < SGEMM6_A4; ++i) {
        const int id = tid + i * SGEMM_THREADS;
        a_r[i] = id / (SGEMM6_BK / 4), a_c[i] = (id % (SGEMM6_BK / 4)) * 4;
    }
#pragma unroll
    for (int i = 0; i < SGEMM6_B4; ++i) {
        const int id = tid + i * SGEMM_THREADS;
        b_r[i] = id / (SGEMM_BN / 4), b_c[i] = (id % (SGEMM_BN / 4)) * 4;
    }
    float4 a[SGEMM6_A4], b[SGEMM6_B4];  // the next tile, on its way from global memory
    auto load = [&](int t) {
#pragma unroll
        for (int i = 0; i < SGEMM6_A4; ++i) {
            const int r = row0 + a_r[i], c = t + a_c[i];
            a[i] = sgemm_load4(A + (size_t)r * K + c, r < M ? K - c : 0, vec);
        }
#pragma unroll
        for (int i = 0; i < SGEMM6_B4; ++i) {
            const int r = t + b_r[i], c = col0 + b_c[i];
            b[i] = sgemm_load4(B + (size_t)r * N + c, r < K ? N - c : 0, vec);
        }
    };
    auto store = [&](int s) {
        // Transposed: the 4 k's of a float4 of A go to 4 rows of As.
#pragma unroll
        for (int i = 0; i < SGEMM6_A4; ++i) {
            As[s][(a_c[i] + 0) * SGEMM6_LDA + a_r[i]] = a[i].x;
            As[s][(a_c[i] + 1) * SGEMM6_LDA + a_r[i]] = a[i].y;
            As[s][(a_c[i] + 2) * SGEMM6_LDA + a_r[i]] = a[i].z;
            As[s][(a_c[i] + 3) * SGEMM6_LDA + a_r[i]] = a[i].w;
        }
#pragma unroll
        for (int i = 0; i < SGEMM6_B4; ++i) *reinterpret_cast<float4*>(&Bs[s][b_r[i] * SGEMM_BN + b_c[i]]) = b[i];
    };

    load(0);
    store(0);
    __syncthreads();
    float acc[SGEMM_TM][SGEMM_TN] = {};
    int buf = 0;
    for (int t = 0; t < K; t += SGEMM6_BK) {
        const bool more = t + SGEMM6_BK < K;  // uniform: every thread takes the same branches
        if (more) load(t + SGEMM6_BK);  // in flight during the math below (~1 us of latency to hide)
        const float* as = As[buf];
        const float* bs = Bs[buf];
#pragma unroll
        for (int d = 0; d < SGEMM6_BK; ++d) {
            const float4 a0 = *reinterpret_cast<const float4*>(&as[d * SGEMM6_LDA + wm]);
            const float4 a1 = *reinterpret_cast<const float4*>(&as[d * SGEMM6_LDA + wm + 16]);
            const float4 b0 = *reinterpret_cast<const float4*>(&bs[d * SGEMM_BN + wn]);
            const float4 b1 = *reinterpret_cast<const float4*>(&bs[d * SGEMM_BN + wn + 32]);
            const float a_frag[SGEMM_TM] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
            const float b_frag[SGEMM_TN] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
            for (int i = 0; i < SGEMM_TM; ++i) {
#pragma unroll
                for (int j = 0; j < SGEMM_TN; ++j) acc[i][j] += a_frag[i] * b_frag[j];
            }
        }
        // The other buffer was last read in the previous trip, before the barrier that ended it.
        if (more) store(buf ^ 1);
        __syncthreads();  // the next tile is complete, and nobody reads this one any more
        buf ^= 1;
    }
    // Row i of the lane's 8 is wm + (i / 4) * 16 + i % 4; cols wn .. + 3 and wn + 32 .. + 35. For one
    // (i, half) the warp writes 4 rows x 128 contiguous bytes.
#pragma unroll
    for (int i = 0; i < SGEMM_TM; ++i) {
        const int r = row0 + wm + (i / 4) * 16 + i % 4;
#pragma unroll
        for (int j = 0; j < SGEMM_TN; j += 4) {
            const int c = col0 + wn + (j / 4) * 32;
            sgemm_store4(C + (size_t)r * N + c, make_float4(acc[i][j], acc[i][j + 1], acc[i][j + 2], acc[i][j + 3]),
                         r < M ? N - c : 0, vec);
        }
    }
}
