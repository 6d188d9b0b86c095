// Solution: vadd_index (lesson 01). Block blockIdx.x starts after blockIdx.x whole blocks of
// blockDim.x threads each; gridDim.x (the number of blocks) has nothing to do with it. Seed 002's
// example: block 2, thread 5 of 8-thread blocks is element 2 * 8 + 5 = 21.

__global__ void vadd_index(float* c, const float* a, const float* b, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        c[i] = a[i] + b[i];
    }
}
