// Solution: wmma_tile (lesson 06). mma_sync(acc, a, b, acc) accumulates in place: 16 x 16 x 16
// multiply-adds, fp16 products summed in fp32, by the whole warp in one call. store_matrix_sync
// writes the accumulator's 256 floats back in row-major order; its pointer is the tile's first
// element of C and its leading dimension is N, C's row length.

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
        wmma::load_matrix_sync(a, A + tile_row * K + k, K);
        wmma::load_matrix_sync(b, B + k * N + tile_col, N);
        wmma::mma_sync(acc, a, b, acc);
    }
    wmma::store_matrix_sync(C + tile_row * N + tile_col, acc, N, wmma::mem_row_major);
}
