// Solution: vadd_grid_stride (lesson 01). The stride is the number of threads in the grid,
// gridDim.x * blockDim.x: in each trip the whole grid covers one contiguous window of that many
// elements, so a warp's 32 loads stay next to each other (coalesced) on every trip.

__global__ void vadd_grid_stride(float* c, const float* a, const float* b, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        c[i] = a[i] + b[i];
    }
}
