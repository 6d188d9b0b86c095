// Exercise (lesson 04): input checks (seed 002's vector_add_launcher, seed 003's CHECK_INPUT).
//
// vadd_checks(a, b) returns a + b for two 1-D float32 CUDA tensors of the same length. The kernel
// and the launch are right, but nothing checks the inputs: the kernel only ever sees pointers, so a
// float64 tensor, a strided view, a 2-D tensor or a longer b give garbage or worse, silently.
// Reject each with a message that names the problem: TORCH_CHECK(condition, "message", ...)
// raises a Python RuntimeError. (This is a torch-style snippet: the first build compiles torch's
// headers, about 30 s to a minute. jitlab predefines CHECK_CUDA, CHECK_CONTIGUOUS and CHECK_INPUT.)
//
//   %%cuda vadd_checks --exercise            (the cell in 04_torch_bindings)
#include <torch/extension.h>

__global__ void vadd_checks_kernel(const float* a, const float* b, float* c, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        c[i] = a[i] + b[i];
    }
}

torch::Tensor vadd_checks(torch::Tensor a, torch::Tensor b) {
    // TODO: a and b must be CUDA tensors, contiguous, float32, one-dimensional, of the same length
    auto c = torch::empty_like(a);
    const int64_t n = a.numel();
    if (n == 0) {
        return c;
    }
    const int block = 256;
    const unsigned grid = (unsigned)((n + block - 1) / block);
    vadd_checks_kernel<<<grid, block>>>((const float*)a.data_ptr(), (const float*)b.data_ptr(),
                                        (float*)c.data_ptr(), n);
    return c;
}
