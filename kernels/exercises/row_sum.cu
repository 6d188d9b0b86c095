// Exercise (lesson 03): one block per row, and a tree in shared memory.
//
// out[r] = the sum of row r of a rows x cols matrix (row-major), one block of 256 threads per row:
// row_sum<<<rows, 256>>>. Each thread adds up its share of the row (columns t, t + 256, ...) in a
// register and writes it to s[t]; the block then has to fold its 256 partial sums into one. This
// layout (a row per block) is how softmax and layer norm kernels start.
//
//   %%cuda row_sum --exercise                (the cell in 03_reduction)

#define ROW_BLOCK 256  // the launch's block size: a power of two, so the tree halves evenly

__global__ void row_sum(float* out, const float* x, int rows, int cols) {
    __shared__ float s[ROW_BLOCK];
    const int t = threadIdx.x;
    const float* row = x + (size_t)blockIdx.x * cols;  // this block's row
    float v = 0.0f;
    for (int c = t; c < cols; c += blockDim.x) {
        v += row[c];
    }
    s[t] = v;
    __syncthreads();  // all 256 partial sums are in s before anyone reads another thread's
    // TODO: fold s[0..256) into s[0]: in each step half as many threads as before add the upper
    // half onto the lower half, and nobody starts the next step before everyone finished this one
    if (t == 0) {
        out[blockIdx.x] = s[0];
    }
}
