// Exercise (lesson 02): number the threads of a 2-D grid, as seed 000 does.
//
// Every thread writes its global number into `number` at its own (row, col). Seed 000's numbering:
//   block number  = the blocks before this one in the grid, counted row by row
//   thread number = the threads before this one in its block, counted row by row
//   global number = block number * (threads per block) + thread number
// The launch: thread_number_2d<<<dim3(gx, gy), dim3(8, 4)>>>, and number is a
// (gy * 4) x (gx * 8) int32 matrix: exactly one element per thread, so no bounds check.
// The two formulas marked TODO are copied from seed 000, as printed.
//
//   %%cuda thread_number_2d --exercise       (the cell in 02_2d_indexing)

__global__ void thread_number_2d(int* number, int width) {
    int row = blockIdx.y * blockDim.y + threadIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    int block = blockIdx.y * gridDim.x + gridDim.x;      // TODO: seed 000's block number: right?
    int thread = threadIdx.y * blockDim.x + blockDim.x;  // TODO: seed 000's thread-in-block number: right?
    number[row * width + col] = block * (blockDim.x * blockDim.y) + thread;
}
