// Exercise (lesson 04): the launcher picks the grid (seed 001's launch_add2).
//
// Seed 001 keeps the <<<grid, block>>> launch in a host function: Python (or a torch binding)
// calls launch_scale(y, x, alpha, n) with raw pointers, and the function chooses the grid.
// jitlab calls host functions like this one directly: k.launch_scale(y, x, 2.5, n).
// It computes y = alpha * x; its grid is wrong for most n.
//
//   %%cuda launch_grid --exercise            (the cell in 04_torch_bindings)

__global__ void scale_kernel(float* y, const float* x, float alpha, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        y[i] = alpha * x[i];
    }
}

void launch_scale(float* y, const float* x, float alpha, int n) {
    const int block = 256;
    const int grid = n / block;  // TODO: integer division rounds down: n = 1000 gets 3 blocks, n = 100 none
    scale_kernel<<<grid, block>>>(y, x, alpha, n);
}
