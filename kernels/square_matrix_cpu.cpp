// square_matrix_cpu: seed 004's square_matrix as a torch-style C++ snippet (torch headers, CPU).
//
//   m = jitlab.load("kernels/square_matrix_cpu.cpp")
//   y = m.square_matrix_cpu(x)       # x: 2-D float32 CPU tensor
#include <torch/extension.h>

torch::Tensor square_matrix_cpu(torch::Tensor matrix) {
    TORCH_CHECK(matrix.dim() == 2, "matrix must be 2-D, got ", matrix.dim(), "-D");
    TORCH_CHECK(matrix.scalar_type() == torch::kFloat32, "matrix must be float32");
    auto m = matrix.contiguous();
    auto result = torch::empty_like(m);
    const float* in = m.data_ptr<float>();
    float* out = result.data_ptr<float>();
    for (int64_t i = 0; i < m.numel(); ++i) {
        out[i] = in[i] * in[i];
    }
    return result;
}
