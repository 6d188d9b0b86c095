// Exercise (lesson 06): one warp, one 16 x 16 tile of C, on the tensor cores.
//
// C = A @ B with fp16 A (M x K) and B (K x N), fp32 C (M x N), row-major, M, N and K multiples of
// 16. One warp (32 threads) per 16 x 16 tile of C: wmma_tile<<<dim3(N / 16, M / 16), 32>>>.
// A fragment is a 16 x 16 block spread over the warp's 32 lanes; the warp loads two, multiplies
// them into an fp32 accumulator fragment, and finally stores that. load/store take a pointer to
// the block's first element and the row length of the matrix in memory (the leading dimension).
// The loads are done; the multiply-accumulate and the store are missing.
//
//   %%cuda wmma_tile --exercise              (the cell in 06_matmul)

#include <mma.h>
#include <cuda_fp16.h>

using namespace nvcuda;

__global__ void wmma_tile(float* C, const __half* A, const __half* B, int M, int N, int K) {
    const int tile_row = blockIdx.y * 16, tile_col = blockIdx.x * 16;
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> b;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, 0.0f);
    for (int k = 0; k < K; k += 16) {
        wmma::load_matrix_sync(a, A + tile_row * K + k, K);  // A[tile_row .. + 15][k .. + 15]
        wmma::load_matrix_sync(b, B + k * N + tile_col, N);  // B[k .. + 15][tile_col .. + 15]
        // TODO: acc += a * b (one call: wmma::mma_sync(d, a, b, c) computes d = a * b + c)
    }
    // TODO: store acc to C[tile_row .. + 15][tile_col .. + 15] (wmma::store_matrix_sync, rows of
    // length N, wmma::mem_row_major)
}
