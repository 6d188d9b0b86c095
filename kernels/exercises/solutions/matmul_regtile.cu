// Solution: matmul_regtile (lesson 06). acc[i][j] is C[row i][col j] of this thread's 4 x 4, and
// each k adds A[row i][k] * B[k][col j] = a[i] * b[j] to it: the outer product of a column of 4
// and a row of 4, 16 multiply-adds from 8 registers. With the loops unrolled (they are: the bounds
// are constants), acc, a and b all live in registers.

#define BM 64
#define BN 64
#define BK 8
#define TM 4
#define TN 4

__global__ void matmul_regtile(float* C, const float* A, const float* B, int M, int N, int K) {
    __shared__ float As[BK][BM];
    __shared__ float Bs[BK][BN];
    const int tid = threadIdx.x;
    const int tr = tid / (BN / TN), tc = tid % (BN / TN);
    const int row0 = blockIdx.y * BM, col0 = blockIdx.x * BN;
    float acc[TM][TN] = {};
    for (int t = 0; t < K; t += BK) {
        for (int e = tid; e < BM * BK; e += blockDim.x) {
            const int m = e / BK, ka = e % BK;
            As[ka][m] = (row0 + m < M && t + ka < K) ? A[(row0 + m) * K + t + ka] : 0.0f;
            const int kb = e / BN, n = e % BN;
            Bs[kb][n] = (t + kb < K && col0 + n < N) ? B[(t + kb) * N + col0 + n] : 0.0f;
        }
        __syncthreads();
        for (int k = 0; k < BK; ++k) {
            float a[TM], b[TN];
            for (int i = 0; i < TM; ++i) a[i] = As[k][tr * TM + i];
            for (int j = 0; j < TN; ++j) b[j] = Bs[k][tc * TN + j];
            for (int i = 0; i < TM; ++i) {
                for (int j = 0; j < TN; ++j) acc[i][j] += a[i] * b[j];
            }
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
