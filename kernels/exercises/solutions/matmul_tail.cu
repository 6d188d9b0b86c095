// Solution: matmul_tail (lesson 06). K / TILE rounds down: at K = 40 the loop makes 2 trips and
// the last 8 terms of every dot product are lost (at K = 7, all of them). ceil(K / TILE) trips
// take the partial tile too, and then its copies must stop at K: element t + tx of a row of A and
// row t + ty of B exist only below K. Zeros there add nothing to the sums, so the loop over the
// tile stays the same. (Without the K guards the last trip reads past the rows of A and past the
// end of B: wrong numbers, or an illegal address.)

#define TILE 16

__global__ void matmul_tail(float* C, const float* A, const float* B, int M, int N, int K) {
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row = blockIdx.y * TILE + ty;
    const int col = blockIdx.x * TILE + tx;
    const int tiles = (K + TILE - 1) / TILE;
    float acc = 0.0f;
    for (int i = 0; i < tiles; ++i) {
        const int t = i * TILE;
        As[ty][tx] = (row < M && t + tx < K) ? A[row * K + t + tx] : 0.0f;
        Bs[ty][tx] = (t + ty < K && col < N) ? B[(t + ty) * N + col] : 0.0f;
        __syncthreads();
        for (int k = 0; k < TILE; ++k) {
            acc += As[ty][k] * Bs[k][tx];
        }
        __syncthreads();
    }
    if (row < M && col < N) {
        C[row * N + col] = acc;
    }
}
