// sgemm_tiles: C = A @ B in fp32 (row-major), one register-tiled kernel whose tile shape is five
// #defines, so that `jitlab tune` can choose them per size and per GPU (lesson 09).
//
//   jitlab tune kernels/tuning/sgemm_tiles.cu                      # the space: sgemm_tiles.ref.py's TUNE
//   best = jitlab.tuned("kernels/tuning/sgemm_tiles.cu", 4096)   # the exported table's defines for a size
//   m = jitlab.load("kernels/tuning/sgemm_tiles.cu", defines=best)
//
// A block computes a BM x BN tile of C with (BM / TM) * (BN / TN) threads; each thread keeps a
// TM x TN tile of accumulators in registers and walks K in steps of BK through shared memory.
// What the knobs trade (napkin math per block and K step):
//   - global loads: (BM + BN) * BK floats for 2 * BM * BN * BK FLOPs, so bigger BM, BN raise the
//     arithmetic intensity (BM = BN = 128: 32 FLOP per float loaded; 32: 8);
//   - shared reads: TM + TN floats per thread per k for TM * TN FMAs, so bigger TM, TN raise the
//     FMA share of the inner loop (8 x 8: 4 FMA per load; 2 x 2: 1);
//   - but TM * TN accumulators cost registers (8 x 8 = 64 of them, ~100 registers a thread), which caps
//     the threads a block may have and the blocks an SM holds; BK sets how often a block waits at a
//     barrier (K / BK times) against how much shared memory it holds ((BM + BN) * BK * 4 bytes).
// The best tile changes with the size: a 512 x 512 C is only 16 tiles of 128 x 128, too few blocks for
// an H100's 132 SMs, so small sizes want small tiles.
#ifndef BM
#define BM 64
#endif
#ifndef BN
#define BN 64
#endif
#ifndef BK
#define BK 8
#endif
#ifndef TM
#define TM 4
#endif
#ifndef TN
#define TN 4
#endif
#define THREADS ((BM / TM) * (BN / TN))

__global__ void __launch_bounds__(THREADS) sgemm_tiles(float* C, const float* A, const float* B, int M, int N, int K) {
    __shared__ float As[BK][BM];  // A's tile transposed: the TM rows a thread needs at one k are adjacent
    __shared__ float Bs[BK][BN];
    const int tx = threadIdx.x % (BN / TN), ty = threadIdx.x / (BN / TN);
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    float acc[TM][TN] = {};
    float a[TM], b[TN];
    for (int k0 = 0; k0 < K; k0 += BK) {
        for (int i = threadIdx.x; i < BM * BK; i += THREADS) {  // consecutive threads read along A's row
            const int r = i / BK, c = i % BK, gr = row0 + r, gc = k0 + c;
            As[c][r] = gr < M && gc < K ? A[(size_t)gr * K + gc] : 0.f;
        }
        for (int i = threadIdx.x; i < BK * BN; i += THREADS) {  // and along B's row: coalesced
            const int r = i / BN, c = i % BN, gr = k0 + r, gc = col0 + c;
            Bs[r][c] = gr < K && gc < N ? B[(size_t)gr * N + gc] : 0.f;
        }
        __syncthreads();
#pragma unroll
        for (int k = 0; k < BK; ++k) {
#pragma unroll
            for (int i = 0; i < TM; ++i) a[i] = As[k][ty * TM + i];
#pragma unroll
            for (int j = 0; j < TN; ++j) b[j] = Bs[k][tx * TN + j];
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) acc[i][j] += a[i] * b[j];
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) {
            const int r = row0 + ty * TM + i, c = col0 + tx * TN + j;
            if (r < M && c < N) C[(size_t)r * N + c] = acc[i][j];
        }
}
