// Solution: matmul_tiles (lesson 06). Bs[ty][tx] is element (t + ty, col) of B: the tile's row ty,
// the block's column tx (consecutive tx read consecutive floats: coalesced). Two barriers: after
// the copies, so that the products read complete tiles (a thread reads 15 elements other threads
// wrote); and after the products, so that no thread overwrites a tile in the next trip while
// another one is still reading it. Without them the result is wrong only sometimes: a race.

#define TILE 16

__global__ void matmul_tiles(float* C, const float* A, const float* B, int M, int N, int K) {
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row = blockIdx.y * TILE + ty;
    const int col = blockIdx.x * TILE + tx;
    float acc = 0.0f;
    for (int t = 0; t < K; t += TILE) {
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
