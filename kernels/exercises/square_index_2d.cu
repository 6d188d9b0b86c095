// Exercise (lesson 02): the row and the column of a thread in a 2-D grid.
//
// out = x * x, elementwise, for a height x width matrix (row-major: element (row, col) is at
// row * width + col), one thread per element, blocks of 16 x 16 threads and
// square_index_2d<<<dim3(ceil(width / 16), ceil(height / 16)), dim3(16, 16)>>>.
// x runs along a row (it picks the column), y runs down the matrix (it picks the row).
// The two formulas below are seed 000's, as printed.
//
//   %%cuda square_index_2d --exercise        (the cell in 02_2d_indexing)

__global__ void square_index_2d(float* out, const float* x, int width, int height) {
    int row = blockIdx.y * gridDim.y + threadIdx.y;  // TODO: seed 000's formula: is it right?
    int col = blockIdx.x * gridDim.x + threadIdx.x;  // TODO: and this one?
    if (row < height && col < width) {
        int idx = row * width + col;
        out[idx] = x[idx] * x[idx];
    }
}
