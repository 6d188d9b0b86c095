#include <torch/extension.h>
#include "two_norm_kernel.h"
void torch_launch_two_norm(const torch::Tensor &a_tensor,
                           const torch::Tensor &b_tensor, 
                           torch::Tensor &c_tensor, 
                           int n, int m) {
    launch_two_norm((const float *)a_tensor.data_ptr(),
                    (const float *)b_tensor.data_ptr(),
                    (float *)c_tensor.data_ptr(),
                    n,m);
}

// Version 1: m.two_norm1(a, b, c) writes ||a - b||_2 into c[0]. Any shapes with the same number of
// elements; the scratch for the per-block partial sums comes from torch's caching allocator (a
// few KB, reused across calls without a cudaMalloc).
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>

void torch_launch_two_norm1(const torch::Tensor &a_tensor,
                            const torch::Tensor &b_tensor,
                            torch::Tensor &c_tensor) {
    TORCH_CHECK(a_tensor.is_cuda(), "two_norm1: a must be a CUDA tensor");
    TORCH_CHECK(b_tensor.device() == a_tensor.device() && c_tensor.device() == a_tensor.device(),
                "two_norm1: a, b and c must be on the same device");
    TORCH_CHECK(a_tensor.scalar_type() == torch::kFloat32 && b_tensor.scalar_type() == torch::kFloat32 &&
                c_tensor.scalar_type() == torch::kFloat32, "two_norm1: a, b and c must be float32");
    TORCH_CHECK(a_tensor.numel() == b_tensor.numel(), "two_norm1: a and b differ in size (",
                a_tensor.numel(), " vs ", b_tensor.numel(), " elements)");
    TORCH_CHECK(c_tensor.numel() >= 1, "two_norm1: c must hold at least one element");
    const c10::DeviceGuard device_guard(a_tensor.device());
    const torch::Tensor a = a_tensor.contiguous(), b = b_tensor.contiguous();  // no copy when they are
    const int64_t n = a.numel();
    const int blocks = two_norm1_blocks(n);
    torch::Tensor partials = torch::empty({blocks}, a.options().dtype(torch::kFloat64));
    // torch's current stream (through c10's device-generic interface: no CUDA header in this file).
    void* stream = c10::impl::VirtualGuardImpl(a.device().type()).getStream(a.device()).native_handle();
    const char* err = launch_two_norm1(a.data_ptr<float>(), b.data_ptr<float>(), c_tensor.data_ptr<float>(),
                                       partials.data_ptr<double>(), blocks, n, stream);
    TORCH_CHECK(err == nullptr, "two_norm1: kernel launch failed: ", err);
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("two_norm",  // 函数在python中调用的名字
          &torch_launch_two_norm,  // 函数指针，需绑定的C++函数引用
          "compute 2-norm of two matrix"  // 函数说明
          );
    m.def("two_norm1", &torch_launch_two_norm1,
          "c[0] = ||a - b||_2 for any size: multi-block float4 reduction, deterministic (version 1)");
}
