// Exercise (lesson 06): shared-memory tiles, and the two barriers around them.
//
// C = A @ B (row-major; A is M x K, B is K x N), one thread per element of C, 16 x 16 blocks:
// matmul_tiles<<<dim3(ceil(N / 16), ceil(M / 16)), dim3(16, 16)>>>. The block walks along K in
// steps of 16: its 256 threads copy a 16 x 16 tile of A and one of B into shared memory (one
// element each), then every thread takes 16 products from the tiles. Each element fetched from
// global memory is used 16 times. The B tile is missing, and so are the barriers.
//
//   %%cuda matmul_tiles --exercise           (the cell in 06_matmul)

#define TILE 16

__global__ void matmul_tiles(float* C, const float* A, const float* B, int M, int N, int K) {
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row = blockIdx.y * TILE + ty;
    const int col = blockIdx.x * TILE + tx;
    float acc = 0.0f;
    for (int t = 0; t < K; t += TILE) {
        // Thread (ty, tx) brings element (row, t + tx) of A into As[ty][tx], 0 past the edges.
        As[ty][tx] = (row < M && t + tx < K) ? A[row * K + t + tx] : 0.0f;
        // TODO: and element (t + ty, col) of B into Bs[ty][tx], 0 past the edges
        Bs[ty][tx] = 0.0f;
        // TODO: may a thread start reading the tiles before every thread has written its element?
        for (int k = 0; k < TILE; ++k) {
            acc += As[ty][k] * Bs[k][tx];
        }
        // TODO: and may a fast thread overwrite the tiles (next trip) while a slow one still reads them?
    }
    if (row < M && col < N) {
        C[row * N + col] = acc;
    }
}
