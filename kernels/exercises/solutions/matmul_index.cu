// Solution: matmul_index (lesson 06). In a row-major matrix with N columns, element (k, col) is
// k * N + col: k whole rows of N, then col. B[col * K + k] reads B as if it were stored by
// columns (B transposed): in bounds, but the wrong numbers. The B index of consecutive threads
// (col, col + 1, ...) now differs by 1, so a warp reads one contiguous row segment of B.

__global__ void matmul_index(float* C, const float* A, const float* B, int M, int N, int K) {
    const int row = blockIdx.y * blockDim.y + threadIdx.y;
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < M && col < N) {
        float acc = 0.0f;
        for (int k = 0; k < K; ++k) {
            acc += A[row * K + k] * B[k * N + col];
        }
        C[row * N + col] = acc;
    }
}
