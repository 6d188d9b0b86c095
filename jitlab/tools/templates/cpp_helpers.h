// A host function's failure: a C++ exception it threw.
[[maybe_unused]] void host_failed(int err, const char* fn, const char* (*last_exception)()) {
  TORCH_CHECK(false,
              $host_exception);
}
