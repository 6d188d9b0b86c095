// Solution: vadd_bounds (lesson 01). The grid has ceil(n / 256) * 256 threads, up to 255 more than
// there are elements; the check costs one compare per thread and only the last block diverges.

__global__ void vadd_bounds(float* c, const float* a, const float* b, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        c[i] = a[i] + b[i];
    }
}
