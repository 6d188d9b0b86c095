// hgemm: C = A @ B on the tensor cores with WMMA: fp16 in, fp32 accumulate, fp16 out (as torch.matmul
// gives for fp16 tensors), row-major: A is M x K, B is K x N, C is M x N. Any M, N, K.
//
//   k = jitlab.load("kernels/hgemm.cu")
//   k.hgemm_kernel2(C, A, B, M, N, K, grid=(cdiv(N, 128), cdiv(M, 128)), block=256)
//   k.hgemm_bf16_kernel2(...)   # the same kernel for bfloat16 tensors (sm_80 and newer)
//   (every version's launch: run1, run2 in kernels/hgemm.ref.py; cdiv(a, b) = (a + b - 1) // b)
//
// A tensor core multiplies small tiles: one WMMA mma_sync is a whole warp computing a 16 x 16 x 16
// product (4096 FMAs). Peaks: T4 65 TFLOP/s fp16, H100 SXM ~990 dense (8 and 67 for fp32 on the CUDA
// cores). At 4096^3 the H100's floor is ~0.14 ms, the inputs take 0.02 ms to read: feeding the
// tensor cores from shared memory fast enough is the whole game.
//
// version 1 (hgemm_kernel1): 4 warps, one 16 x 16 fragment each, 16-wide slices staged in shared memory. The API, not speed.
// version 2 (hgemm_kernel2): 128 x 128 x 32 tiles, 8 warps of 4 x 2 fragments, cp.async double buffering. The one to use.
//
// Measured on an H100 at 4096^3 (cuBLAS 0.18 ms, ~740 TFLOP/s): 5.5 ms and 0.50 ms (~275 TFLOP/s,
// 0.37x cuBLAS). WMMA with operands in registers peaks at ~640 TFLOP/s there; version 2 is bound by
// shared memory: 384 B of fragment loads per 16 x 16 x 16 product against 128 B per clock per SM
// caps this shape near 300 TFLOP/s (Nsight Compute: short_scoreboard stalls first). cuBLAS uses
// Hopper's wgmma, where 4 warps share operands read from shared memory once.

#include <mma.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>

using namespace nvcuda;

__device__ __forceinline__ void hgemm_store(__half* p, float v) { *p = __float2half(v); }
__device__ __forceinline__ void hgemm_store(__nv_bfloat16* p, float v) { *p = __float2bfloat16(v); }

// ---------------------------------------------------------------------------------------------
// version 1: one 16 x 16 fragment per warp, shared-memory staging

#define HGEMM1_TILE 32  // block tile: 2 x 2 warps of 16 x 16
#define HGEMM1_LD 24    // 16 halves + 8: a row of 48 bytes (WMMA wants a multiple of 16 bytes)

__global__ void __launch_bounds__(128) hgemm_kernel1(__half* C, const __half* A, const __half* B, int M, int N, int K) {
    __shared__ __align__(32) __half As[HGEMM1_TILE][HGEMM1_LD];         // 32 rows x 16 k
    __shared__ __align__(32) __half Bs[16][HGEMM1_TILE + 8];            // 16 k x 32 cols
    __shared__ __align__(32) float Cs[4][16 * 16];                      // one fragment per warp
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int row0 = blockIdx.y * HGEMM1_TILE, col0 = blockIdx.x * HGEMM1_TILE;
    const int wr = (warp / 2) * 16, wc = (warp % 2) * 16;  // the warp's fragment in the block tile

    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, 0.0f);
    for (int t = 0; t < K; t += 16) {
        // 512 halves of each tile, 4 per thread, zeros past the edges.
        for (int e = tid; e < HGEMM1_TILE * 16; e += blockDim.x) {
            const int ar = e / 16, ac = e % 16;
            As[ar][ac] = (row0 + ar < M && t + ac < K) ? A[(size_t)(row0 + ar) * K + t + ac] : __float2half(0.0f);
            const int br = e / HGEMM1_TILE, bc = e % HGEMM1_TILE;
            Bs[br][bc] = (t + br < K && col0 + bc < N) ? B[(size_t)(t + br) * N + col0 + bc] : __float2half(0.0f);
        }
        __syncthreads();
        // The warp's 32 lanes load the two 16 x 16 operands together (each lane holds a few
        // elements, in a layout only the hardware needs to know) and multiply-accumulate.
        wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> b;
        wmma::load_matrix_sync(a, &As[wr][0], HGEMM1_LD);
        wmma::load_matrix_sync(b, &Bs[0][wc], HGEMM1_TILE + 8);
        wmma::mma_sync(acc, a, b, acc);
        __syncthreads();
    }
    // A fragment's elements are spread over the lanes in an unspecified layout: store it to shared
    // memory, then each lane writes 8 of its 256 elements as fp16, guarded at the edges.
    wmma::store_matrix_sync(Cs[warp], acc, 16, wmma::mem_row_major);
    __syncwarp();
    for (int e = lane; e < 256; e += 32) {
        const int r = row0 + wr + e / 16, c = col0 + wc + e % 16;
        if (r < M && c < N) C[(size_t)r * N + c] = __float2half(Cs[warp][e]);
    }
}

// ---------------------------------------------------------------------------------------------
// version 2: 128 x 128 x 32 tiles, 8 warps of 64 x 32, cp.async double buffering

// The tile shape, overridable to experiment: jitlab.load(path, defines={"HGEMM_BK": 16, "HGEMM_STAGES": 4})
// (launch HGEMM_THREADS threads per block then, one block per BM x BN tile). Measured on the H100 at
// 4096^3: BK 16 with 4 stages, 64 x 64 warp tiles and 128 x 64 blocks were all slower than this.
#ifndef HGEMM_BM
#define HGEMM_BM 128  // block tile
#endif
#ifndef HGEMM_BN
#define HGEMM_BN 128
#endif
#ifndef HGEMM_BK
#define HGEMM_BK 32
#endif
#ifndef HGEMM_STAGES
#define HGEMM_STAGES 2  // shared-memory stages: 3 would need 57 KB, over the 48 KB a block gets statically
#endif
#ifndef HGEMM_WM
#define HGEMM_WM 64  // warp tile: 4 x 2 fragments of 16 x 16
#endif
#ifndef HGEMM_WN
#define HGEMM_WN 32
#endif
#ifndef HGEMM_MINB
#define HGEMM_MINB 2  // blocks per SM for __launch_bounds__: at most 128 registers a thread
#endif
#define HGEMM_THREADS (32 * (HGEMM_BM / HGEMM_WM) * (HGEMM_BN / HGEMM_WN))
#define HGEMM_LDA (HGEMM_BK + 8)  // 40 halves = 80 B: 8 rows of a fragment load fall on 8 distinct 16-byte bank groups
#define HGEMM_LDB (HGEMM_BN + 8)  // 136 halves = 272 B: likewise
#define HGEMM_A_STAGE (HGEMM_BM * HGEMM_LDA)  // halves per stage: 5120
#define HGEMM_B_STAGE (HGEMM_BK * HGEMM_LDB)  // 4352
#define HGEMM_LDC 20  // the epilogue's per-warp 16 x 16 fp32 buffer, rows padded by 4
#define HGEMM_A_CHUNKS (HGEMM_BM * HGEMM_BK / 8 / HGEMM_THREADS)  // 16-byte chunks per thread per tile
#define HGEMM_B_CHUNKS (HGEMM_BK * HGEMM_BN / 8 / HGEMM_THREADS)

// 16 bytes global -> shared. sm_80+: cp.async (the copy engine writes shared memory directly, no
// registers; src_bytes = 0 zero-fills the 16 bytes without reading). Older: a plain load and store.
__device__ __forceinline__ void hgemm_copy16(void* dst, const void* src, bool valid) {
#if __CUDA_ARCH__ >= 800
    const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(dst));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(src), "r"(valid ? 16 : 0));
#else
    *reinterpret_cast<uint4*>(dst) = valid ? *reinterpret_cast<const uint4*>(src) : make_uint4(0, 0, 0, 0);
#endif
}

__device__ __forceinline__ void hgemm_copy_commit() {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;\n" ::);
#endif
}

// Wait until at most `pending` committed groups of this thread are still in flight.
template <int pending>
__device__ __forceinline__ void hgemm_copy_wait() {
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group %0;\n" ::"n"(pending));
#endif
}

// One stage, anywhere: A's BM x BK tile and B's BK x BN tile in chunks of 8 elements (16 bytes),
// zeros past the edges. On the vector path (K % 8 == N % 8 == 0) a chunk is wholly inside or
// wholly outside the matrix; otherwise the chunk is loaded element by element.
template <typename T>
__device__ __forceinline__ void hgemm_load_edge(T* as, T* bs, const T* A, const T* B, int M, int N, int K,
                                                int row0, int col0, int t, bool vec) {
    const int tid = threadIdx.x;
#pragma unroll
    for (int i = 0; i < HGEMM_A_CHUNKS; ++i) {
        const int id = tid + i * HGEMM_THREADS;
        const int ar = id / (HGEMM_BK / 8), ac = (id % (HGEMM_BK / 8)) * 8;
        T* dst = as + ar * HGEMM_LDA + ac;
        const int row = row0 + ar, col = t + ac;
        if (vec) {
            const bool ok = row < M && col < K;
            // A chunk outside the matrix reads nothing; its address just has to be a valid one.
            hgemm_copy16(dst, ok ? A + (size_t)row * K + col : A, ok);
        } else {
#pragma unroll
            for (int j = 0; j < 8; ++j) dst[j] = (row < M && col + j < K) ? A[(size_t)row * K + col + j] : T(0.0f);
        }
    }
#pragma unroll
    for (int i = 0; i < HGEMM_B_CHUNKS; ++i) {
        const int id = tid + i * HGEMM_THREADS;
        const int br = id / (HGEMM_BN / 8), bc = (id % (HGEMM_BN / 8)) * 8;
        T* dst = bs + br * HGEMM_LDB + bc;
        const int row = t + br, col = col0 + bc;
        if (vec) {
            const bool ok = row < K && col < N;
            hgemm_copy16(dst, ok ? B + (size_t)row * N + col : B, ok);
        } else {
#pragma unroll
            for (int j = 0; j < 8; ++j) dst[j] = (row < K && col + j < N) ? B[(size_t)row * N + col + j] : T(0.0f);
        }
    }
}

// Rows between one thread's chunks: a block's threads cover A_STEP rows of A (B_STEP of B) per round.
#define HGEMM_A_STEP (HGEMM_THREADS / (HGEMM_BK / 8))
#define HGEMM_B_STEP (HGEMM_THREADS / (HGEMM_BN / 8))

template <typename T>
__device__ __forceinline__ void hgemm_body2(T* C, const T* A, const T* B, int M, int N, int K) {
    // 2 stages x (10240 + 8704) B = 37888 B: under the 48 KB of static shared memory, and two blocks
    // fit on an SM of any arch from sm_80 (sm_75: one).
    __shared__ __align__(128) T smem[HGEMM_STAGES * (HGEMM_A_STAGE + HGEMM_B_STAGE)];
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int row0 = blockIdx.y * HGEMM_BM, col0 = blockIdx.x * HGEMM_BN;
    const int wm = (warp / (HGEMM_BN / HGEMM_WN)) * HGEMM_WM, wn = (warp % (HGEMM_BN / HGEMM_WN)) * HGEMM_WN;
    const size_t bits = reinterpret_cast<size_t>(A) | reinterpret_cast<size_t>(B) | reinterpret_cast<size_t>(C);
    const bool vec = (bits & 15) == 0 && K % 8 == 0 && N % 8 == 0;
    // An interior block (no edge of M or N in its tile) copies whole tiles without a single check,
    // from pointers set up once: chunk i of A is A_STEP rows below chunk 0, of B B_STEP rows.
    const bool interior = vec && row0 + HGEMM_BM <= M && col0 + HGEMM_BN <= N;
    const int a_r = tid / (HGEMM_BK / 8), a_c = (tid % (HGEMM_BK / 8)) * 8;
    const int b_r = tid / (HGEMM_BN / 8), b_c = (tid % (HGEMM_BN / 8)) * 8;
    const T* a_src = A + (size_t)(row0 + a_r) * K + a_c;  // + t for tile t (dereferenced only if interior)
    const T* b_src = B + (size_t)b_r * N + col0 + b_c;    // + t * N

    auto load_stage = [&](int s, int t) {
        T* as = smem + s * (HGEMM_A_STAGE + HGEMM_B_STAGE);
        T* bs = as + HGEMM_A_STAGE;
        if (interior && t + HGEMM_BK <= K) {
#pragma unroll
            for (int i = 0; i < HGEMM_A_CHUNKS; ++i) {
                hgemm_copy16(as + (a_r + i * HGEMM_A_STEP) * HGEMM_LDA + a_c, a_src + t + (size_t)i * HGEMM_A_STEP * K, true);
            }
#pragma unroll
            for (int i = 0; i < HGEMM_B_CHUNKS; ++i) {
                hgemm_copy16(bs + (b_r + i * HGEMM_B_STEP) * HGEMM_LDB + b_c, b_src + (size_t)(t + i * HGEMM_B_STEP) * N, true);
            }
        } else {
            hgemm_load_edge(as, bs, A, B, M, N, K, row0, col0, t, vec);
        }
    };

    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[HGEMM_WM / 16][HGEMM_WN / 16];
#pragma unroll
    for (int i = 0; i < HGEMM_WM / 16; ++i) {
#pragma unroll
        for (int j = 0; j < HGEMM_WN / 16; ++j) wmma::fill_fragment(acc[i][j], 0.0f);
    }

    const int tiles = (K + HGEMM_BK - 1) / HGEMM_BK;
    // Prologue: the first STAGES - 1 tiles in flight. One commit per stage, even an empty one, so
    // that "wait until STAGES - 2 groups are pending" always means "the oldest tile has landed".
#pragma unroll
    for (int s = 0; s < HGEMM_STAGES - 1; ++s) {
        if (s < tiles) load_stage(s, s * HGEMM_BK);
        hgemm_copy_commit();
    }
    for (int kt = 0; kt < tiles; ++kt) {
        hgemm_copy_wait<HGEMM_STAGES - 2>();  // this thread's copies of tile kt are done
        __syncthreads();  // everyone's are, and everyone finished multiplying tile kt - 1
        // Refill the stage that tile kt - 1 used: the barrier above says nobody reads it any more.
        const int next = kt + HGEMM_STAGES - 1;
        if (next < tiles) load_stage(next % HGEMM_STAGES, next * HGEMM_BK);
        hgemm_copy_commit();

        const T* as = smem + (kt % HGEMM_STAGES) * (HGEMM_A_STAGE + HGEMM_B_STAGE);
        const T* bs = as + HGEMM_A_STAGE;
#pragma unroll
        for (int kk = 0; kk < HGEMM_BK; kk += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a[HGEMM_WM / 16];
#pragma unroll
            for (int i = 0; i < HGEMM_WM / 16; ++i) {
                wmma::load_matrix_sync(a[i], as + (wm + i * 16) * HGEMM_LDA + kk, HGEMM_LDA);
            }
#pragma unroll
            for (int j = 0; j < HGEMM_WN / 16; ++j) {
                wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> b;
                wmma::load_matrix_sync(b, bs + kk * HGEMM_LDB + wn + j * 16, HGEMM_LDB);
#pragma unroll
                for (int i = 0; i < HGEMM_WM / 16; ++i) wmma::mma_sync(acc[i][j], a[i], b, acc[i][j]);
            }
        }
    }
    hgemm_copy_wait<0>();
    __syncthreads();  // the pipeline's shared memory is free: reuse it for the epilogue

    // Each warp: a fragment at a time through its own 16 x 20 floats; lane l converts row l / 2,
    // columns (l % 2) * 8 .. + 7, and writes them as one 16-byte store (vector path, inside C).
    float* cs = reinterpret_cast<float*>(smem) + warp * 16 * HGEMM_LDC;
    const int lr = lane / 2, lc = (lane % 2) * 8;
#pragma unroll
    for (int i = 0; i < HGEMM_WM / 16; ++i) {
#pragma unroll
        for (int j = 0; j < HGEMM_WN / 16; ++j) {
            wmma::store_matrix_sync(cs, acc[i][j], HGEMM_LDC, wmma::mem_row_major);
            __syncwarp();
            const int r = row0 + wm + i * 16 + lr, c = col0 + wn + j * 16 + lc;
            __align__(16) T out[8];
#pragma unroll
            for (int e = 0; e < 8; ++e) hgemm_store(&out[e], cs[lr * HGEMM_LDC + lc + e]);
            if (vec) {
                if (r < M && c < N) *reinterpret_cast<uint4*>(C + (size_t)r * N + c) = *reinterpret_cast<const uint4*>(out);
            } else if (r < M) {
#pragma unroll
                for (int e = 0; e < 8; ++e) {
                    if (c + e < N) C[(size_t)r * N + c + e] = out[e];
                }
            }
            __syncwarp();  // the lanes are done reading before the next fragment overwrites cs
        }
    }
}

__global__ void __launch_bounds__(HGEMM_THREADS, HGEMM_MINB) hgemm_kernel2(__half* C, const __half* A,
                                                                           const __half* B, int M, int N, int K) {
    hgemm_body2(C, A, B, M, N, K);
}

// The same kernel for bfloat16 (fp32's range, 8 bits of mantissa): WMMA takes bf16 from sm_80; built
// for an older arch the kernel is empty and writes nothing. ~190 TFLOP/s on the H100, not 275: CUDA
// 13's WMMA compiles bf16 fragment loads to generic LD.E + MOVM, not ldmatrix (LDSM) as for fp16.
__global__ void __launch_bounds__(HGEMM_THREADS, HGEMM_MINB) hgemm_bf16_kernel2(__nv_bfloat16* C,
                                                                                const __nv_bfloat16* A,
                                                                                const __nv_bfloat16* B,
                                                                                int M, int N, int K) {
#if __CUDA_ARCH__ >= 800
    hgemm_body2(C, A, B, M, N, K);
#endif
}
