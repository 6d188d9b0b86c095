#include <torch/extension.h>

__global__ void custom_kernel(const float* input, float* output, int size) {
    const int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < size) {
        output[idx] = input[idx] * 2.0f;  // 示例操作
    }
}

torch::Tensor custom_operation(torch::Tensor input) {
    auto output = torch::zeros_like(input);
    const int threads = 256;
    const int blocks = (input.numel() + threads - 1) / threads;
    
    custom_kernel<<<blocks, threads>>>(
        input.data_ptr<float>(),
        output.data_ptr<float>(),
        input.numel());
    
    return output;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("custom_operation", &custom_operation, "Custom CUDA operation");
}
