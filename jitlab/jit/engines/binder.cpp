// jitlab's binder: Python functions over torch-style snippets' C-ABI entries (jitlab/jit/cabi.py).
//
// Built once per toolchain: jitlab/jit/engines/binder.py writes JITLAB_TYPES(X) (X(code, C++ type)), the
// void result's code JITLAB_VOID and JITLAB_MAX_ARGS in front of this file. Each function converts its
// arguments with pybind11's casters, torch's included, as a pybind11 binding of the snippet's function would
// (convert=true), calls the entry inside torch's error handling (a c10::Error is its Python exception, a
// TORCH_WARN a Python warning), and converts the result.
#include <torch/csrc/utils/pybind.h>
#include <torch/csrc/Exceptions.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <string>
#include <utility>
#include <vector>

namespace py = pybind11;

namespace {

using Entry = void (*)(void** args, void* result);
constexpr std::size_t kMaxArgs = JITLAB_MAX_ARGS;
constexpr int kVoid = JITLAB_VOID;

// One argument: its caster, made in place, and the address of the value the caster holds.
struct Arg {
  alignas(std::max_align_t) unsigned char caster[96];
  void (*destroy)(void*) = nullptr;
  void* value = nullptr;
  ~Arg() { if (destroy) destroy(caster); }
};

template <class T>
bool load_as(Arg& a, py::handle h) {
  using Caster = py::detail::make_caster<T>;
  static_assert(sizeof(Caster) <= sizeof(a.caster), "a caster larger than an argument's room");
  auto* c = new (a.caster) Caster();
  a.destroy = [](void* p) { static_cast<Caster*>(p)->~Caster(); };
  if (!c->load(h, true)) return false;
  a.value = &py::detail::cast_op<T&>(*c);
  return true;
}

bool load(int code, Arg& a, py::handle h) {
  switch (code) {
#define JITLAB_LOAD(code, ...) case code: return load_as<__VA_ARGS__>(a, h);
    JITLAB_TYPES(JITLAB_LOAD)
#undef JITLAB_LOAD
  }
  return false;
}

template <class T>
py::object take_as(void* p) {
  T* value = static_cast<T*>(p);
  struct Destroy { T* v; ~Destroy() { v->~T(); } } destroy{value};
  static_assert(sizeof(T) <= 64, "a result larger than its room");
  py::handle h = py::detail::make_caster<T>::cast(std::move(*value), py::return_value_policy::move, py::handle());
  if (!h) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(h);
}

py::object take(int code, void* p) {
  switch (code) {
#define JITLAB_TAKE(code, ...) case code: return take_as<__VA_ARGS__>(p);
    JITLAB_TYPES(JITLAB_TAKE)
#undef JITLAB_TAKE
  }
  throw std::logic_error("jitlab binder: unknown result code");
}

// What a function calls and how: its entry, argument and result codes, and its pybind11 signature for errors.
struct Spec {
  Entry entry;
  std::vector<int> params;
  int result;
  std::string name, signature;
  bool torch_errors;  // torch's handling (wrap_pybind_function's), else pybind11's own translators
};

// pybind11's own words for arguments its casters refuse.
py::type_error incompatible(const Spec& s, const py::args& args) {
  std::string given;
  for (std::size_t i = 0; i < args.size(); ++i)
    given += (i ? ", " : "") + std::string(py::repr(args[i]));
  return py::type_error(s.name + "(): incompatible function arguments. The following argument types are supported:\n"
                        "    1. " + s.signature + "\n\nInvoked with: " + given);
}

py::object call(const Spec& s, const py::args& args) {
  const std::size_t n = s.params.size();
  if (args.size() != n) throw incompatible(s, args);
  std::array<Arg, kMaxArgs> slots;
  void* values[kMaxArgs];
  for (std::size_t i = 0; i < n; ++i) {
    if (!load(s.params[i], slots[i], args[i])) throw incompatible(s, args);
    values[i] = slots[i].value;
  }
  alignas(std::max_align_t) unsigned char result[64];
  if (!s.torch_errors) {
    s.entry(values, result);
    return s.result == kVoid ? py::none() : take(s.result, result);
  }
  HANDLE_TH_ERRORS
  s.entry(values, result);
  return s.result == kVoid ? py::none() : take(s.result, result);
  END_HANDLE_TH_ERRORS_PYBIND
}

}  // namespace

PYBIND11_MODULE(jitlab_binder, m) {
  m.def("function", [](std::uintptr_t address, std::vector<int> params, int result, std::string name,
                       std::string signature, bool torch_errors) {
    if (params.size() > kMaxArgs) throw py::value_error("jitlab binder: more parameters than JITLAB_MAX_ARGS");
    auto spec = std::make_shared<const Spec>(Spec{reinterpret_cast<Entry>(address), std::move(params), result,
                                                  std::move(name), std::move(signature), torch_errors});
    return py::cpp_function([spec](py::args args) { return call(*spec, args); }, py::name(spec->name.c_str()));
  });
}
