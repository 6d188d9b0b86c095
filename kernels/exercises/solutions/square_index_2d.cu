// Solution: square_index_2d (lesson 02). As in 1-D, a block's first thread comes after
// blockIdx whole blocks of blockDim threads, in each direction separately: the block size
// (blockDim), not the grid size (gridDim). Seed 004's square_matrix_kernel has it right.

__global__ void square_index_2d(float* out, const float* x, int width, int height) {
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row < height && col < width) {
        int idx = row * width + col;
        out[idx] = x[idx] * x[idx];
    }
}
