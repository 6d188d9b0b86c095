// Exercise (lesson 06): register tiling, the outer product.
//
// C = A @ B (row-major; A is M x K, B is K x N). A block of 256 threads owns a 64 x 64 tile of C,
// and each thread a 4 x 4 piece of it: rows tr * 4 .. + 3, cols tc * 4 .. + 3, accumulated in
// acc[4][4] (registers). matmul_regtile<<<dim3(ceil(N / 64), ceil(M / 64)), 256>>>. For each k
// of a shared-memory tile, a thread loads 4 values of A's column k and 4 of B's row k into
// registers: 8 loads feed 16 multiply-adds (a 1 x 1 thread needs 2 loads per multiply-add).
// The multiply-adds are missing.
//
//   %%cuda matmul_regtile --exercise         (the cell in 06_matmul)

#define BM 64
#define BN 64
#define BK 8
#define TM 4
#define TN 4

__global__ void matmul_regtile(float* C, const float* A, const float* B, int M, int N, int K) {
    __shared__ float As[BK][BM];  // A's tile transposed: As[k][m], so a thread's 4 rows are adjacent
    __shared__ float Bs[BK][BN];
    const int tid = threadIdx.x;
    const int tr = tid / (BN / TN), tc = tid % (BN / TN);  // 16 x 16 threads
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    float acc[TM][TN] = {};
    for (int t = 0; t < K; t += BK) {
        for (int e = tid; e < BM * BK; e += blockDim.x) {  // 512 elements of each tile, 2 per thread
            const int m = e / BK, ka = e % BK;
            As[ka][m] = (row0 + m < M && t + ka < K) ? A[(row0 + m) * K + t + ka] : 0.0f;
            const int kb = e / BN, n = e % BN;
            Bs[kb][n] = (t + kb < K && col0 + n < N) ? B[(t + kb) * N + col0 + n] : 0.0f;
        }
        __syncthreads();
        for (int k = 0; k < BK; ++k) {
            float a[TM], b[TN];
            for (int i = 0; i < TM; ++i) a[i] = As[k][tr * TM + i];  // rows of this thread, column k of A
            for (int j = 0; j < TN; ++j) b[j] = Bs[k][tc * TN + j];  // row k of B, cols of this thread
            // TODO: the outer product: every acc[i][j] gains a[i] * b[j]
        }
        __syncthreads();
    }
    for (int i = 0; i < TM; ++i) {
        for (int j = 0; j < TN; ++j) {
            const int r = row0 + tr * TM + i, c = col0 + tc * TN + j;
            if (r < M && c < N) C[r * N + c] = acc[i][j];
        }
    }
}
