// grid= / block=: a positive int or a tuple of 1 to 3 positive ints (torch.Size included).
struct Dims { unsigned x = 1, y = 1, z = 1; };

[[maybe_unused]] Dims dims(const py::object& v, const char* fn, const char* what) {
  TORCH_CHECK_VALUE(!v.is_none(),
                    $no_config);
  std::vector<py::handle> items;
  if (py::isinstance<py::tuple>(v) || py::isinstance<py::list>(v)) {
    for (py::handle h : v) items.push_back(h);
  } else {
    items.push_back(v);
  }
  bool ok = !items.empty() && items.size() <= 3;
  unsigned d[3] = {1, 1, 1};
  for (size_t k = 0; ok && k < items.size(); ++k) {
    ok = py::isinstance<py::int_>(items[k]) && !py::isinstance<py::bool_>(items[k]);
    const int64_t n = ok ? items[k].cast<int64_t>() : 0;
    ok = ok && n > 0 && n <= (int64_t)std::numeric_limits<unsigned>::max();
    d[k] = (unsigned)n;
  }
  TORCH_CHECK_VALUE(ok,
                    $bad_dims);
  return Dims{d[0], d[1], d[2]};
}

// "(x, y, z)", as Python prints a tuple.
[[maybe_unused]] std::string dims_text(const Dims& d) {
  return "(" + std::to_string(d.x) + ", " + std::to_string(d.y) + ", " + std::to_string(d.z) + ")";
}

// shared_mem=: bytes of dynamic shared memory per block.
[[maybe_unused]] unsigned shared_mem_of(int64_t v, const char* fn) {
  TORCH_CHECK_VALUE(v >= 0 && v <= (int64_t)std::numeric_limits<unsigned>::max(),
                    $shared_mem);
  return (unsigned)v;
}

// stream=None: torch's current stream on the device; else a torch.cuda.Stream or a raw cudaStream_t.
[[maybe_unused]] void* stream_of(const py::object& stream, const c10::Device& device) {
  if (stream.is_none()) return c10::impl::VirtualGuardImpl(device.type()).getStream(device).native_handle();
  if (py::hasattr(stream, "cuda_stream")) return reinterpret_cast<void*>(stream.attr("cuda_stream").cast<uintptr_t>());
  return reinterpret_cast<void*>(stream.cast<uintptr_t>());
}

// The current CUDA device, for a kernel without tensor arguments.
[[maybe_unused]] c10::Device current_cuda_device() {
  return c10::impl::VirtualGuardImpl(c10::DeviceType::CUDA).getDevice();
}

// A host function's failure: a C++ exception it threw (-1), or a CUDA error it left behind.
[[maybe_unused]] void host_failed(int err, const char* fn, const char* (*last_exception)()) {
  TORCH_CHECK(err != -1,
              $host_exception);
  TORCH_CHECK(false,
              $host_cuda_error);
}

[[maybe_unused]] void launch_failed(int err, const char* fn, const Dims& g, const Dims& b, unsigned smem) {
  const std::string name = jitlab_error_name(err);
  std::string hint;
  if ($config_errors) {
    hint =
        $config_hint;
  } else if ($sticky_errors) {
    hint = $sticky_hint;
  }
  TORCH_CHECK(false,
              $launch_failed);
}
