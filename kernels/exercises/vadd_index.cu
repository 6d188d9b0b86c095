// Exercise (lesson 01): the 1-D global index.
//
// c = a + b for n floats, one element per thread, launched as vadd_index<<<ceil(n / 256), 256>>>.
// Seed 000 gives a thread's number in a 1-D grid as `blockIdx.x * gridDim.x + threadIdx.x`.
// Try it on paper with 4 blocks of 8 threads (gridDim.x = 4, blockDim.x = 8): which element does
// thread 5 of block 2 get, and which of the 32 elements does no thread get?
//
//   %%cuda vadd_index --exercise             (the cell in 01_vector_add)

__global__ void vadd_index(float* c, const float* a, const float* b, int n) {
    int i = blockIdx.x * gridDim.x + threadIdx.x;  // TODO: seed 000's formula, as printed: is it right?
    if (i < n) {
        c[i] = a[i] + b[i];
    }
}
