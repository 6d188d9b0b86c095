// Exercise (lesson 06): the index math of a matrix product.
//
// C = A @ B, all row-major: A is M x K (element (i, k) at A[i * K + k]), B is K x N, C is M x N.
// One thread per element of C, blocks of 16 x 16 threads, x along the columns:
// matmul_index<<<dim3(ceil(N / 16), ceil(M / 16)), dim3(16, 16)>>>. C[row][col] is the dot
// product of row `row` of A and column `col` of B. One index below is wrong; the TODO says where.
//
//   %%cuda matmul_index --exercise           (the cell in 06_matmul)

__global__ void matmul_index(float* C, const float* A, const float* B, int M, int N, int K) {
    const int row = blockIdx.y * blockDim.y + threadIdx.y;
    const int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < M && col < N) {
        float acc = 0.0f;
        for (int k = 0; k < K; ++k) {
            acc += A[row * K + k] * B[col * K + k];  // TODO: is B[col * K + k] element (k, col) of B?
        }
        C[row * N + col] = acc;
    }
}
