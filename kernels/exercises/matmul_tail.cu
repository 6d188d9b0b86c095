// Exercise (lesson 06): the last, partial tile.
//
// The tiled matmul of exercise 06.2 (C = A @ B, row-major, 16 x 16 tiles, one thread per element
// of C), written with a count of tiles: matmul_tail<<<dim3(ceil(N / 16), ceil(M / 16)), dim3(16, 16)>>>.
// It is right when K is a multiple of 16. Run it as it is first: the check tries K = 40 and K = 7.
// The copies guard the edges of M and N, not of K; the TODO says where the tail is lost.
//
//   %%cuda matmul_tail --exercise            (the cell in 06_matmul)

#define TILE 16

__global__ void matmul_tail(float* C, const float* A, const float* B, int M, int N, int K) {
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row = blockIdx.y * TILE + ty;
    const int col = blockIdx.x * TILE + tx;
    const int tiles = K / TILE;  // TODO: K = 40 is 2.5 tiles: how many trips does the loop make?
    float acc = 0.0f;
    for (int i = 0; i < tiles; ++i) {
        const int t = i * TILE;
        As[ty][tx] = row < M ? A[row * K + t + tx] : 0.0f;
        Bs[ty][tx] = col < N ? B[(t + ty) * N + col] : 0.0f;
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
