// saxpy: y = a * x + y, the "hello world" of kernel-only snippets.
//
//   k = jitlab.load("kernels/saxpy.cu")
//   k.saxpy(y, x, 2.0, n, grid=(n + 255) // 256, block=256)
//
// No torch header: NVRTC compiles it in process, so a body edit is back in about 0.05 s.

__global__ void saxpy(float* y, const float* x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {  // the last block may run past the end
        y[i] = a * x[i] + y[i];
    }
}
