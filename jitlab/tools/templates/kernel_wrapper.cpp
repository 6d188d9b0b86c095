// $signature
void ${fn}_py(${params}const py::object& grid, const py::object& block, int64_t shared_mem, const py::object& stream) {
  const char* fn = "$fn";
  $checks
  const Dims g = dims(grid, fn, "grid"), b = dims(block, fn, "block");
  const unsigned smem = shared_mem_of(shared_mem, fn);
  const c10::DeviceGuard guard(device);
  const int err = jitlab_launch_$fn(g.x, g.y, g.z, b.x, b.y, b.z, smem, stream_of(stream, device)$args);
  if (err) launch_failed(err, fn, g, b, smem);
}
