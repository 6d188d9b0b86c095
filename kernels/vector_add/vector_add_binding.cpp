#include <torch/extension.h>
torch::Tensor vector_add_launcher(torch::Tensor& a, torch::Tensor& b);
torch::Tensor vector_add_launcher1(torch::Tensor& a, torch::Tensor& b);  // version 1, in vector_add.cu
torch::Tensor vector_add_launcher2(torch::Tensor& a, torch::Tensor& b);  // version 2, in vector_add.cu
// Write the C++ function that we will call from Python
torch::Tensor vector_add_binding(torch::Tensor& a, torch::Tensor& b) {
    return vector_add_launcher(a, b);
}
PYBIND11_MODULE(example_kernels, m) {
    m.def(
        "vector_add", // Name of the Python function to create
        &vector_add_binding, // Corresponding C++ function to call
        "Launches the vector_add kernel" // Docstring
    );
    m.def("vector_add1", &vector_add_launcher1,
          "c = a + b, version 1: float4 grid-stride kernel, one resident wave");
    m.def("vector_add2", &vector_add_launcher2,
          "c = a + b, version 2: one 4096-float tile per block, a grid of N / 4096 blocks");
}
