// Solution: thread_number_2d (lesson 02). Counting row by row, the blocks before block
// (blockIdx.x, blockIdx.y) are blockIdx.y full rows of gridDim.x blocks plus blockIdx.x blocks of
// its own row; the threads before (threadIdx.x, threadIdx.y) in a block likewise. Seed 000 wrote
// the row length (gridDim.x, blockDim.x) where the position in the row (blockIdx.x, threadIdx.x)
// belongs; its final formula, (blockIdx.x + blockIdx.y * gridDim.x) * (blockDim.x * blockDim.y)
// + threadIdx.y * blockDim.x + threadIdx.x, is right. The thread number in the block is also how
// the hardware cuts a block into warps: threads 0-31 are warp 0, 32-63 warp 1, ...

__global__ void thread_number_2d(int* number, int width) {
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int block = blockIdx.y * gridDim.x + blockIdx.x;
    int thread = threadIdx.y * blockDim.x + threadIdx.x;
    number[row * width + col] = block * (blockDim.x * blockDim.y) + thread;
}
