// hgemm: C = A @ B on the tensor cores with WMMA: fp16 in, fp32 accumulate, fp16 out (as torch.matmul
// gives for fp16 tensors), row-major: A is M x K, B is K x N, C is M x N. Any M, N, K.
//
//   k = jitlab.load("kernels/hgemm.cu")
//   k.hgemm_kernel3(C, A, B, M, N, K, grid=(cdiv(N, 128), cdiv(M, 256)), block=256, shared_mem=162816)
//   k.hgemm_bf16_kernel3(...)   # the same kernel for bfloat16 tensors (sm_80 and newer)
//   (shared_mem as on sm_80 and sm_90; every version's launch, for any GPU: run1, run2, run3 in
//   kernels/hgemm.ref.py; cdiv(a, b) = (a + b - 1) // b)
//
// A tensor core multiplies small tiles: one WMMA mma_sync is a whole warp computing a 16 x 16 x 16
// product (4096 FMAs). Peaks: T4 65 TFLOP/s fp16, H100 SXM ~990 dense (8 and 67 for fp32 on the CUDA
// cores). At 4096^3 the H100's floor is ~0.14 ms, the inputs take 0.02 ms to read: feeding the
// tensor cores from shared memory fast enough is the whole game.
//
// version 1 (hgemm_kernel1): 4 warps, one 16 x 16 fragment each, 16-wide slices staged in shared memory. The API, not speed.
// version 2 (hgemm_kernel2): 128 x 128 x 32 tiles, 8 warps of 4 x 2 fragments, cp.async double buffering in 38 KB.
// version 3 (hgemm_kernel3): 256 x 128 x 64 tiles, 8 warps of 4 x 4 fragments, 3 stages in 159 KB. The one to use.
//
// Measured on an H100 at 4096^3, alternating with torch.matmul (benchmarks/hgemm_sweep.py; cuBLAS
// ~0.19 ms in both dtypes: ~700 TFLOP/s): version 1 5.5 ms; version 2 0.52 ms (~265 TFLOP/s, 0.37x
// cuBLAS), bf16 0.77 ms (0.24x); version 3 0.35 ms (~390 TFLOP/s, 0.55x), bf16 0.40 ms (~345 TFLOP/s,
// 0.47x, with the same instruction mix in its main loop as fp16). WMMA with operands in registers
// peaks at ~640 TFLOP/s there. Version 2 is bound by shared memory: 384 B of fragment loads per
// 16 x 16 x 16 product against 128 B per clock per SM cap it near 300 TFLOP/s (Nsight Compute:
// short_scoreboard stalls first). Version 3's 64 x 64 warp tiles need 256 B, and its 64-deep stages
// halve the barriers (32 deep: 0.44x); Nsight Compute then finds the tensor pipe and L2 both ~70%
// busy. cuBLAS uses Hopper's wgmma, where 4 warps share operands read from shared memory once.

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
// 4096^3: BK 16 with 4 stages, 64 x 64 warp tiles and 128 x 64 blocks were all slower than this
// within 48 KB of static shared memory (version 3 has more room).
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
// registers; src_bytes = 0 zero-fills the 16 bytes without reading; .L2::128B has L2 fetch whole
// 128-byte lines, which ptxas otherwise adds to some builds and not others: ~10% on version 3's bf16
// on the H100). Older: a plain load and store.
__device__ __forceinline__ void hgemm_copy16(void* dst, const void* src, bool valid) {
#if __CUDA_ARCH__ >= 800
    const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(dst));
    asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;\n" ::"r"(s), "l"(src), "r"(valid ? 16 : 0));
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
template <typename T, int BM, int BN, int BK, int LDA, int LDB, int THREADS>
__device__ __forceinline__ void hgemm_load_edge(T* as, T* bs, const T* A, const T* B, int M, int N, int K,
                                                int row0, int col0, int t, bool vec) {
    const int tid = threadIdx.x;
#pragma unroll 1  // edge tiles are rare: keep the registers for the accumulators
    for (int i = 0; i < BM * BK / 8 / THREADS; ++i) {
        const int id = tid + i * THREADS;
        const int ar = id / (BK / 8), ac = (id % (BK / 8)) * 8;
        T* dst = as + ar * LDA + ac;
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
#pragma unroll 1
    for (int i = 0; i < BK * BN / 8 / THREADS; ++i) {
        const int id = tid + i * THREADS;
        const int br = id / (BN / 8), bc = (id % (BN / 8)) * 8;
        T* dst = bs + br * LDB + bc;
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

// The epilogue of versions 2 and 3: one 16 x 16 fp32 fragment of C at (r0, c0), rounded to T, through
// the warp's 16 x 20 floats `cs` (a fragment's layout is unspecified, shared memory's is not). Lane l
// converts row l / 2, columns (l % 2) * 8 .. + 7, and writes them as one 16-byte store (vector path,
// inside C) or element by element, guarded at the edges.
template <typename T, typename Frag>
__device__ __forceinline__ void hgemm_store_fragment(T* C, const Frag& acc, float* cs, int r0, int c0, int M, int N,
                                                     bool vec) {
    const int lane = threadIdx.x % 32, lr = lane / 2, lc = (lane % 2) * 8;
    wmma::store_matrix_sync(cs, acc, HGEMM_LDC, wmma::mem_row_major);
    __syncwarp();
    const int r = r0 + lr, c = c0 + lc;
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

// Rows between one thread's chunks: a block's threads cover A_STEP rows of A (B_STEP of B) per round.
#define HGEMM_A_STEP (HGEMM_THREADS / (HGEMM_BK / 8))
#define HGEMM_B_STEP (HGEMM_THREADS / (HGEMM_BN / 8))

template <typename T>
__device__ __forceinline__ void hgemm_body2(T* C, const T* A, const T* B, int M, int N, int K) {
    // 2 stages x (10240 + 8704) B = 37888 B: under the 48 KB of static shared memory, and two blocks
    // fit on an SM of any arch from sm_80 (sm_75: one).
    __shared__ __align__(128) T smem[HGEMM_STAGES * (HGEMM_A_STAGE + HGEMM_B_STAGE)];
    const int tid = threadIdx.x, warp = tid / 32;
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
            hgemm_load_edge<T, HGEMM_BM, HGEMM_BN, HGEMM_BK, HGEMM_LDA, HGEMM_LDB, HGEMM_THREADS>(as, bs, A, B, M, N, K, row0, col0, t, vec);
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

    // Each warp: a fragment at a time through its own 16 x 20 floats of the freed shared memory.
    float* cs = reinterpret_cast<float*>(smem) + warp * 16 * HGEMM_LDC;
#pragma unroll
    for (int i = 0; i < HGEMM_WM / 16; ++i) {
#pragma unroll
        for (int j = 0; j < HGEMM_WN / 16; ++j) {
            hgemm_store_fragment(C, acc[i][j], cs, row0 + wm + i * 16, col0 + wn + j * 16, M, N, vec);
        }
    }
}

__global__ void __launch_bounds__(HGEMM_THREADS, HGEMM_MINB) hgemm_kernel2(__half* C, const __half* A,
                                                                           const __half* B, int M, int N, int K) {
    hgemm_body2(C, A, B, M, N, K);
}

// The same kernel for bfloat16 (fp32's range, 8 bits of mantissa): WMMA takes bf16 from sm_80; built
// for an older arch the kernel is empty and writes nothing. ~190 TFLOP/s on the H100, not 275: CUDA
// 13's WMMA compiles bf16 fragment loads to generic LD.E + MOVM, not ldmatrix (LDSM) as for fp16
// (version 3's hgemm_load_shared says why, and works around it).
__global__ void __launch_bounds__(HGEMM_THREADS, HGEMM_MINB) hgemm_bf16_kernel2(__nv_bfloat16* C,
                                                                                const __nv_bfloat16* A,
                                                                                const __nv_bfloat16* B,
                                                                                int M, int N, int K) {
#if __CUDA_ARCH__ >= 800
    hgemm_body2(C, A, B, M, N, K);
#endif
}

// ---------------------------------------------------------------------------------------------
// version 3: 256 x 128 x 64 tiles, 8 warps of 64 x 64, 3 cp.async stages, fragments double-buffered

// Overridable like version 2's; the launch (run3 in hgemm.ref.py) computes grid, block and shared_mem
// with the same table. The k depth is what the arch's shared memory per block allows: 3 stages of
// 64 take 159 KB (sm_80 has 163 KB, sm_90 and sm_100 227 KB), 3 of 32 take 85 KB (sm_86, sm_89 and
// sm_120 have 99 KB), and sm_75 (64 KB, no cp.async) takes 2 stages of 32 (57 KB).
#ifndef HGEMM3_BM
#define HGEMM3_BM 256
#endif
#ifndef HGEMM3_BN
#define HGEMM3_BN 128
#endif
#ifndef HGEMM3_BK
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ == 800 || __CUDA_ARCH__ == 900 || __CUDA_ARCH__ == 1000
#define HGEMM3_BK 64  // one barrier per 64 k instead of 32: 0.44x -> 0.55x cuBLAS on the H100
#else
#define HGEMM3_BK 32
#endif
#endif
#ifndef HGEMM3_STAGES
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#define HGEMM3_STAGES 2
#else
#define HGEMM3_STAGES 3
#endif
#endif
// The tile this arch compiled with, in the module (PTX and cubin): tests/test_kernels.py checks it
// against the launch's table (hgemm.ref.py, v3_tile), which must give the same shared-memory size.
__device__ const int hgemm3_tile[2] = {HGEMM3_BK, HGEMM3_STAGES};
#ifndef HGEMM3_WM
#define HGEMM3_WM 64  // warp tile: 4 x 4 fragments, 8 fragment loads per 16 mma_sync (version 2: 6 per 8)
#endif
#ifndef HGEMM3_WN
#define HGEMM3_WN 64
#endif
#ifndef HGEMM3_GROUP
#define HGEMM3_GROUP 8  // block rows visited together (L2 reuse)
#endif
#ifndef HGEMM3_BF16_LDS
#define HGEMM3_BF16_LDS 1  // 0: bf16 fragments through wmma::load_matrix_sync (see hgemm_load_shared)
#endif
#define HGEMM3_THREADS (32 * (HGEMM3_BM / HGEMM3_WM) * (HGEMM3_BN / HGEMM3_WN))

// Fragment loads from shared memory. CUDA 13 compiles WMMA's bf16 loads with generic addresses (LD.E,
// 4 bytes a lane, plus MOVM to transpose B) where fp16 gets ldmatrix (LDSM, 16 bytes a lane): NVVM
// infers the .shared state space of fp16's wmma.load but not of bf16's, even straight off a
// __shared__ array. So bf16 issues the same wmma.load instruction with .shared spelled out: still
// WMMA filling a WMMA fragment, in its own layout (4 registers of 2 bf16 each, PTX ISA "wmma.load").
template <typename Frag, typename T>
__device__ __forceinline__ void hgemm_load_shared(Frag& f, const T* p, unsigned ldm) {
    wmma::load_matrix_sync(f, p, ldm);
}

#if HGEMM3_BF16_LDS && (!defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800)
#define HGEMM3_WMMA_LOAD_BF16(op)                                                                         \
    unsigned* r = reinterpret_cast<unsigned*>(f.x);                                                       \
    const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(p));                                \
    asm volatile("wmma.load." op ".sync.aligned.row.m16n16k16.shared.bf16 {%0, %1, %2, %3}, [%4], %5;\n" \
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s), "r"(ldm));
__device__ __forceinline__ void hgemm_load_shared(
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major>& f, const __nv_bfloat16* p, unsigned ldm) {
    HGEMM3_WMMA_LOAD_BF16("a")
}
__device__ __forceinline__ void hgemm_load_shared(
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major>& f, const __nv_bfloat16* p, unsigned ldm) {
    HGEMM3_WMMA_LOAD_BF16("b")
}
#endif

// Shared by the mainloop and the epilogue.
#define HGEMM3_FM (HGEMM3_WM / 16)
#define HGEMM3_FN (HGEMM3_WN / 16)
typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> hgemm3_acc[HGEMM3_FM][HGEMM3_FN];

// The k loop of one block: acc += A[row0 .., :] @ B[:, col0 ..] for the warp's 64 x 64. FAST: the block
// is interior (whole tiles in M, N and K, 16-byte aligned), so copies need no checks at all.
template <typename T, bool FAST>
__device__ __forceinline__ void hgemm_mainloop3(hgemm3_acc& acc, T* smem, const T* A, const T* B, int M, int N,
                                                int K, int row0, int col0, int wm, int wn, bool vec) {
    constexpr int BM = HGEMM3_BM, BN = HGEMM3_BN, BK = HGEMM3_BK;
    constexpr int S = HGEMM3_STAGES, THREADS = HGEMM3_THREADS, FM = HGEMM3_FM, FN = HGEMM3_FN, KK = BK / 16;
    constexpr int LDA = BK + 8, LDB = BN + 8;  // rows padded by 16 bytes: conflict-free ldmatrix, as in version 2
    constexpr int A_STAGE = BM * LDA, STAGE = A_STAGE + BK * LDB;  // elements
    constexpr int A_CHUNKS = BM * BK / 8 / THREADS, B_CHUNKS = BK * BN / 8 / THREADS;
    constexpr int A_STEP = THREADS / (BK / 8), B_STEP = THREADS / (BN / 8);
    static_assert(KK % 2 == 0, "BK: a multiple of 32 (the fragment sets alternate within a tile)");
    // The k step that refills a stage: any step before the barrier at KK - 1 (which waits for the next
    // tile's group, so it must come after this commit). Step 1 rather than 0: ptxas then spreads the 12
    // copies among the products of steps 1 and 2, for bf16 as for fp16; at step 0 it issued bf16's in one
    // block of ~60 instructions without an HMMA (sm_90 SASS), the shared-memory queue full while the
    // tensor cores waited.
    constexpr int REFILL = KK > 2 ? 1 : 0;
    static_assert(S >= 2 && A_CHUNKS * THREADS * 8 == BM * BK && B_CHUNKS * THREADS * 8 == BK * BN, "tile shape");

    const int tid = threadIdx.x;
    const int a_r = tid / (BK / 8), a_c = (tid % (BK / 8)) * 8;
    const int b_r = tid / (BN / 8), b_c = (tid % (BN / 8)) * 8;
    const T* a_src = A + (size_t)(row0 + a_r) * K + a_c;  // dereferenced only if FAST
    const T* b_src = B + (size_t)b_r * N + col0 + b_c;
    T* a_dst = smem + a_r * LDA + a_c;
    T* b_dst = smem + A_STAGE + b_r * LDB + b_c;
    auto load_stage = [&](int s, int t) {  // tile t into stage s
        if (FAST) {
#pragma unroll
            for (int i = 0; i < A_CHUNKS; ++i) {
                hgemm_copy16(a_dst + s * STAGE + i * A_STEP * LDA, a_src + t + (size_t)i * A_STEP * K, true);
            }
#pragma unroll
            for (int i = 0; i < B_CHUNKS; ++i) {
                hgemm_copy16(b_dst + s * STAGE + i * B_STEP * LDB, b_src + (size_t)(t + i * B_STEP) * N, true);
            }
        } else {
            T* as = smem + s * STAGE;
            hgemm_load_edge<T, BM, BN, BK, LDA, LDB, THREADS>(as, as + A_STAGE, A, B, M, N, K, row0, col0, t, vec);
        }
    };

    // Two sets of operand fragments: the loads for step k + 1 are issued before step k's products,
    // so their shared-memory latency hides behind 16 mma_sync instead of stalling them.
    wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a[2][FM];
    wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> b[2][FN];
    auto load_fragments = [&](int buf, const T* stage, int kk) {
#pragma unroll
        for (int i = 0; i < FM; ++i) hgemm_load_shared(a[buf][i], stage + (wm + i * 16) * LDA + kk, LDA);
#pragma unroll
        for (int j = 0; j < FN; ++j) hgemm_load_shared(b[buf][j], stage + A_STAGE + kk * LDB + wn + j * 16, LDB);
    };

    const int tiles = (K + BK - 1) / BK;
#pragma unroll
    for (int s = 0; s < S - 1; ++s) {  // prologue: S - 1 tiles in flight, one commit each (as version 2)
        if (s < tiles) load_stage(s, s * BK);
        hgemm_copy_commit();
    }
    hgemm_copy_wait<S - 2>();
    __syncthreads();
    load_fragments(0, smem, 0);
    int cur = 0, fill = S - 1;  // the stage being read, the stage being refilled
    for (int kt = 0; kt < tiles; ++kt) {
        const int nxt = cur + 1 == S ? 0 : cur + 1;
#pragma unroll
        for (int k = 0; k < KK; ++k) {
            if (k == KK - 1) {
                // Tile kt + 1 must have landed before its first fragments are loaded below; the barrier
                // also says that every warp has loaded its last fragments of tile kt - 1's stage ...
                hgemm_copy_wait<S - 2>();
                __syncthreads();
            }
            if (k + 1 < KK) load_fragments((k + 1) % 2, smem + cur * STAGE, (k + 1) * 16);
            else load_fragments((k + 1) % 2, smem + nxt * STAGE, 0);  // past the last tile: unused
            if (k == REFILL) {
                // ... which is the stage refilled here (the barrier at the end of tile kt - 1).
                if (kt + S - 1 < tiles) load_stage(fill, (kt + S - 1) * BK);
                hgemm_copy_commit();
                fill = fill + 1 == S ? 0 : fill + 1;
            }
#pragma unroll
            for (int i = 0; i < FM; ++i) {
#pragma unroll
                for (int j = 0; j < FN; ++j) wmma::mma_sync(acc[i][j], a[k % 2][i], b[k % 2][j], acc[i][j]);
            }
        }
        cur = nxt;
    }
    hgemm_copy_wait<0>();
}

template <typename T>
__device__ __forceinline__ void hgemm_body3(T* C, const T* A, const T* B, int M, int N, int K, T* smem) {
    constexpr int BM = HGEMM3_BM, BN = HGEMM3_BN, WM = HGEMM3_WM, WN = HGEMM3_WN;
    const int tid = threadIdx.x, warp = tid / 32;
    // Block order: grid (x, y) is renumbered so that consecutive blocks walk down GROUP block rows
    // before moving right: the blocks running together share B's column tiles (and A's rows) in L2.
    const int gx = gridDim.x, per_group = HGEMM3_GROUP * gx;
    const int id = blockIdx.y * gx + blockIdx.x, first = id / per_group * HGEMM3_GROUP;
    const int rows = min((int)gridDim.y - first, HGEMM3_GROUP);
    const int row0 = (first + (id % per_group) % rows) * BM, col0 = (id % per_group) / rows * BN;
    const int wm = (warp / (BN / WN)) * WM, wn = (warp % (BN / WN)) * WN;

    const size_t bits = reinterpret_cast<size_t>(A) | reinterpret_cast<size_t>(B) | reinterpret_cast<size_t>(C);
    const bool vec = (bits & 15) == 0 && K % 8 == 0 && N % 8 == 0;
    hgemm3_acc acc;
#pragma unroll
    for (int i = 0; i < HGEMM3_FM; ++i) {
#pragma unroll
        for (int j = 0; j < HGEMM3_FN; ++j) wmma::fill_fragment(acc[i][j], 0.0f);
    }
    if (vec && row0 + BM <= M && col0 + BN <= N && K % HGEMM3_BK == 0) {
        hgemm_mainloop3<T, true>(acc, smem, A, B, M, N, K, row0, col0, wm, wn, vec);
    } else {
        hgemm_mainloop3<T, false>(acc, smem, A, B, M, N, K, row0, col0, wm, wn, vec);
    }
    __syncthreads();  // the pipeline's shared memory is free: reuse it for the epilogue (as version 2)

    float* cs = reinterpret_cast<float*>(smem) + warp * 16 * HGEMM_LDC;
#pragma unroll
    for (int i = 0; i < HGEMM3_FM; ++i) {
#pragma unroll
        for (int j = 0; j < HGEMM3_FN; ++j) {
            hgemm_store_fragment(C, acc[i][j], cs, row0 + wm + i * 16, col0 + wn + j * 16, M, N, vec);
        }
    }
}

// Dynamic shared memory: STAGES x (BM x (BK + 8) + BK x (BN + 8)) x 2 bytes (the table above); past
// 48 KB jitlab opts the kernel in when the launch passes shared_mem=. 255 registers a thread at most:
// the 64 x 64 warp tile's accumulators alone take 128.
__global__ void __launch_bounds__(HGEMM3_THREADS, 1) hgemm_kernel3(__half* C, const __half* A, const __half* B,
                                                                   int M, int N, int K) {
    extern __shared__ __align__(128) unsigned char hgemm3_smem[];
    hgemm_body3(C, A, B, M, N, K, reinterpret_cast<__half*>(hgemm3_smem));
}

// bfloat16, sm_80 and newer (empty on older archs, as version 2's).
__global__ void __launch_bounds__(HGEMM3_THREADS, 1) hgemm_bf16_kernel3(__nv_bfloat16* C, const __nv_bfloat16* A,
                                                                        const __nv_bfloat16* B, int M, int N, int K) {
#if __CUDA_ARCH__ >= 800
    extern __shared__ __align__(128) unsigned char hgemm3_smem[];
    hgemm_body3(C, A, B, M, N, K, reinterpret_cast<__nv_bfloat16*>(hgemm3_smem));
#endif
}
