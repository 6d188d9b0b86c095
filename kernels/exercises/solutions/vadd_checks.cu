// Solution: vadd_checks (lesson 04). One TORCH_CHECK per assumption the kernel makes, each with a
// message that says what was wrong and with what. Checks cost nanoseconds on the host; a missing
// one costs a silent wrong answer, or an illegal memory access that leaves the CUDA context
// unusable until the process restarts (a CPU tensor's pointer handed to the kernel).
#include <torch/extension.h>

__global__ void vadd_checks_kernel(const float* a, const float* b, float* c, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        c[i] = a[i] + b[i];
    }
}

torch::Tensor vadd_checks(torch::Tensor a, torch::Tensor b) {
    TORCH_CHECK(a.is_cuda() && b.is_cuda(), "vadd_checks: a and b must be CUDA tensors, got ", a.device(),
                " and ", b.device());
    TORCH_CHECK(a.is_contiguous() && b.is_contiguous(), "vadd_checks: a and b must be contiguous");
    TORCH_CHECK(a.scalar_type() == torch::kFloat32 && b.scalar_type() == torch::kFloat32,
                "vadd_checks: a and b must be float32, got ", a.scalar_type(), " and ", b.scalar_type());
    TORCH_CHECK(a.dim() == 1 && b.dim() == 1, "vadd_checks: a and b must be one-dimensional");
    TORCH_CHECK(a.numel() == b.numel(), "vadd_checks: a and b must have the same number of elements");
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
