// add2: c = a + b, seed 001's kernel as a kernel-only snippet (no torch header, no binding file).
//
//   k = jitlab.load("kernels/add2.cu")
//   k.add2_kernel(c, a, b, n, grid=(n + 1023) // 1024, block=1024)   # launch the kernel yourself
//   k.launch_add2(c, a, b, n)                                         # or call the seed's launcher
//
// Tensors go in for the pointers (float* <-> float32, CUDA, contiguous); the grid-stride loop makes
// any grid size correct.

__global__ void add2_kernel(float* c,
                            const float* a,
                            const float* b,
                            int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; \
            i < n; i += gridDim.x * blockDim.x) {
        c[i] = a[i] + b[i];
    }
}

void launch_add2(float* c,
                 const float* a,
                 const float* b,
                 int n) {
    dim3 grid((n + 1023) / 1024);
    dim3 block(1024);
    add2_kernel<<<grid, block>>>(c, a, b, n);
}
