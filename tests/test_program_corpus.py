"""A corpus of programs and odd host signatures: jitlab's generated code compiles for every one of them.

Each snippet is written for this test. CUDA ones are compiled (nvcc, compile-only, sm_75: no GPU
needed) through ``jitlab.build``, shims and all; C++ ones are built and loaded, and C++ programs are
also run as programs. What jitlab cannot bind is left out with a reason, never a broken build.
"""

from __future__ import annotations

import pytest

import jitlab
from jitlab.jit.parse import parse_file
from jitlab.worker.execute import run_program

MAIN = 'int main() { std::printf("ok\\n"); return 0; }\n'

CORPUS = {
    # ---- CUDA programs -------------------------------------------------------------------------
    "fnptr_bench.cu": """#include <cstdio>
__global__ void fill(int* x, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] = i; }
__global__ void twice(int* x, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= 2; }
float bench(void (*k)(int*, int), int* x, int n, int reps) {
  cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b); cudaEventRecord(a);
  for (int r = 0; r < reps; ++r) k<<<(n + 255) / 256, 256>>>(x, n);
  cudaEventRecord(b); cudaEventSynchronize(b); float ms = 0; cudaEventElapsedTime(&ms, a, b); return ms / reps;
}
int main() { int* x; cudaMalloc(&x, 4096); std::printf("%f\\n", bench(fill, x, 1024, 3)); cudaFree(x); return 0; }
""",
    "fnref_and_typedef.cu": """#include <cstdio>
typedef void (*kernel_t)(float*, int);
__global__ void zero(float* y, int n) { int i = threadIdx.x; if (i < n) y[i] = 0.f; }
void launch(kernel_t k, float* y, int n) { k<<<1, 128>>>(y, n); }
void launch_ref(void (&k)(float*, int), float* y, int n) { k<<<1, 128>>>(y, n); }
int main() { float* y; cudaMalloc(&y, 512); launch(zero, y, 128); launch_ref(zero, y, 128); return cudaDeviceSynchronize(); }
""",
    "struct_ref.cu": """#include <cstdio>
struct Config { int n; float scale; };
__global__ void scale(float* y, Config c) { int i = threadIdx.x; if (i < c.n) y[i] *= c.scale; }
void configure(Config& c, int n) { c.n = n; c.scale = 2.f; }
Config make_config(int n) { Config c{n, 3.f}; return c; }
void run(const Config& c, float* y) { scale<<<1, 256>>>(y, c); }
int main() { Config c; configure(c, 10); float* y; cudaMalloc(&y, 40); run(c, y); return 0; }
""",
    "const_char.cu": """#include <cstdio>
__global__ void k(int* out) { out[0] = 7; }
void check(const char* what, int err) { if (err) std::printf("%s failed: %d\\n", what, err); }
int count_chars(const char* s) { int n = 0; while (s && s[n]) ++n; return n; }
int main() { int* o; check("malloc", cudaMalloc(&o, 4)); k<<<1, 1>>>(o); check("sync", cudaDeviceSynchronize()); return 0; }
""",
    "default_args.cu": """#include <cstdio>
__global__ void axpy(float* y, const float* x, float a, int n) { int i = threadIdx.x; if (i < n) y[i] += a * x[i]; }
void run_axpy(float* y, const float* x, int n, float a = 2.0f, int block = 256) { axpy<<<(n + block - 1) / block, block>>>(y, x, a, n); }
int main(int argc, char** argv) { std::printf("%d args\\n", argc); return 0; }
""",
    "overloads.cu": """#include <cstdio>
__global__ void add(float* y, float v) { y[threadIdx.x] += v; }
int twice(int x) { return 2 * x; }
float twice(float x) { return 2.f * x; }
void fill(float* y, int n) { add<<<1, n>>>(y, 1.f); }
void fill(int* y, int n) { }
int main() { std::printf("%d %f\\n", twice(2), twice(1.5f)); return 0; }
""",
    "vector_host.cu": """#include <cstdio>
#include <vector>
__global__ void square(float* y, const float* x, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = x[i] * x[i]; }
std::vector<float> host_square(const std::vector<float>& x) { std::vector<float> y(x.size()); for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * x[i]; return y; }
int main() { std::vector<float> v{1, 2, 3}; auto r = host_square(v); std::printf("%f\\n", r[2]); return 0; }
""",
    "macro_kernels.cu": """#include <cstdio>
#define MAKE_FILL(T, NAME) __global__ void NAME(T* y, T v, int n) { int i = threadIdx.x; if (i < n) y[i] = v; }
MAKE_FILL(float, fill_f)
MAKE_FILL(int, fill_i)
#define CUDA_CHECK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { std::printf("%s\\n", cudaGetErrorString(e_)); return 1; } } while (0)
__global__ void plain(float* y) { y[threadIdx.x] = 1.f; }
int main() { float* y; CUDA_CHECK(cudaMalloc(&y, 64)); fill_f<<<1, 16>>>(y, 1.f, 16); CUDA_CHECK(cudaDeviceSynchronize()); return 0; }
""",
    "namespaces.cu": """#include <cstdio>
namespace ops { namespace detail {
__global__ void inc(int* x, int n) { int i = threadIdx.x; if (i < n) x[i] += 1; }
} void launch_inc(int* x, int n) { detail::inc<<<1, 32>>>(x, n); } }
namespace { __global__ void hidden(int* x) { x[0] = 0; } }
int main() { int* x; cudaMalloc(&x, 128); ops::launch_inc(x, 32); hidden<<<1, 1>>>(x); return cudaDeviceSynchronize(); }
""",
    "extern_c.cu": """#include <cstdio>
extern "C" __global__ void neg(float* y, int n) { int i = threadIdx.x; if (i < n) y[i] = -y[i]; }
extern "C" {
int plus_one(int x) { return x + 1; }
void launch_neg(float* y, int n) { neg<<<1, 64>>>(y, n); }
}
int main() { std::printf("%d\\n", plus_one(1)); return 0; }
""",
    "templates.cu": """#include <cstdio>
template <typename T> __global__ void fill(T* y, T v, int n) { int i = threadIdx.x; if (i < n) y[i] = v; }
template __global__ void fill<float>(float*, float, int);
template __global__ void fill<int>(int*, int, int);
template <int BLOCK> __global__ void tiled(float* y) { __shared__ float s[BLOCK]; s[threadIdx.x] = 1.f; __syncthreads(); y[threadIdx.x] = s[BLOCK - 1 - threadIdx.x]; }
template <typename T> T host_max(T a, T b) { return a > b ? a : b; }
__global__ void launcher_free(float* y) { y[0] = 0.f; }
int main() { float* y; cudaMalloc(&y, 1024); fill<float><<<1, 32>>>(y, 2.f, 32); tiled<128><<<1, 128>>>(y); std::printf("%d\\n", host_max(1, 2)); return 0; }
""",
    "device_globals.cu": """#include <cstdio>
__device__ int counter;
__constant__ float coeffs[4] = {1.f, 2.f, 3.f, 4.f};
__device__ float poly(float x) { return coeffs[0] + x * (coeffs[1] + x * (coeffs[2] + x * coeffs[3])); }
__global__ void eval(float* y, const float* x, int n) { int i = threadIdx.x; if (i < n) { y[i] = poly(x[i]); atomicAdd(&counter, 1); } }
int read_counter() { int h = 0; cudaMemcpyFromSymbol(&h, counter, sizeof(int)); return h; }
int main() { std::printf("%d\\n", read_counter()); return 0; }
""",
    "stream_and_dim3.cu": """#include <cstdio>
__global__ void k2d(float* y, int w, int h) { int x = blockIdx.x * blockDim.x + threadIdx.x, z = blockIdx.y * blockDim.y + threadIdx.y; if (x < w && z < h) y[z * w + x] = 1.f; }
void launch2d(float* y, int w, int h, dim3 block, cudaStream_t s) { dim3 grid((w + block.x - 1) / block.x, (h + block.y - 1) / block.y); k2d<<<grid, block, 0, s>>>(y, w, h); }
cudaError_t sync_all() { return cudaDeviceSynchronize(); }
int main() { float* y; cudaMalloc(&y, 64 * 64 * 4); launch2d(y, 64, 64, dim3(16, 16), 0); return (int)sync_all(); }
""",
    "argv_helpers.cu": """#include <cstdio>
#include <cstdlib>
__global__ void k(int* x) { x[threadIdx.x] = threadIdx.x; }
int parse_n(int argc, char** argv, int fallback) { return argc > 1 ? std::atoi(argv[1]) : fallback; }
int main(int argc, char* argv[]) { int n = parse_n(argc, argv, 32); int* x; cudaMalloc(&x, n * 4); k<<<1, n>>>(x); return 0; }
""",
    "class_methods.cu": """#include <cstdio>
class Timer { public: Timer() { cudaEventCreate(&a_); cudaEventCreate(&b_); } void start() { cudaEventRecord(a_); }
  float stop() { cudaEventRecord(b_); cudaEventSynchronize(b_); float ms; cudaEventElapsedTime(&ms, a_, b_); return ms; }
 private: cudaEvent_t a_, b_; };
__global__ void busy(float* y) { y[threadIdx.x] = sqrtf((float)threadIdx.x); }
float time_busy(Timer& t, float* y) { t.start(); busy<<<1, 32>>>(y); return t.stop(); }
int main() { Timer t; float* y; cudaMalloc(&y, 128); std::printf("%f\\n", time_busy(t, y)); return 0; }
""",
    "lambda_and_auto.cu": """#include <cstdio>
__global__ void k(float* y, int n) { auto sq = [](float v) { return v * v; }; int i = threadIdx.x; if (i < n) y[i] = sq(y[i]); }
auto ceil_div(int a, int b) { return (a + b - 1) / b; }
auto launch = [](float* y, int n) { k<<<ceil_div(n, 128), 128>>>(y, n); };
int main() { float* y; cudaMalloc(&y, 400); launch(y, 100); return 0; }
""",
    "host_device_fn.cu": """#include <cstdio>
__host__ __device__ float mixf(float a, float b, float t) { return a + t * (b - a); }
__global__ void blend(float* y, const float* a, const float* b, float t, int n) { int i = threadIdx.x; if (i < n) y[i] = mixf(a[i], b[i], t); }
int main() { std::printf("%f\\n", mixf(0.f, 10.f, 0.5f)); return 0; }
""",
    "half_and_pointer_returns.cu": """#include <cstdio>
#include <cuda_fp16.h>
__global__ void h2f(float* y, const __half* x, int n) { int i = threadIdx.x; if (i < n) y[i] = __half2float(x[i]); }
float* alloc_floats(int n) { float* p = nullptr; cudaMalloc(&p, n * sizeof(float)); return p; }
void free_all(float** ps, int n) { for (int i = 0; i < n; ++i) cudaFree(ps[i]); }
int main() { float* p = alloc_floats(8); free_all(&p, 1); return 0; }
""",
    "variadic_and_static.cu": """#include <cstdio>
#include <cstdarg>
__global__ void k(int* x) { x[0] = 1; }
void log_line(const char* fmt, ...) { va_list ap; va_start(ap, fmt); std::vprintf(fmt, ap); va_end(ap); }
static int helper(int x) { return x * 3; }
inline int other(int x) { return x + helper(x); }
int main() { log_line("%d\\n", other(2)); return 0; }
""",
    "enum_and_alias.cu": """#include <cstdio>
enum class Mode : int { Add = 0, Mul = 1 };
using real = float;
__global__ void apply(real* y, real v, int mode, int n) { int i = threadIdx.x; if (i < n) y[i] = mode ? y[i] * v : y[i] + v; }
void run(real* y, real v, Mode m, int n) { apply<<<1, 128>>>(y, v, (int)m, n); }
int mode_code(Mode m) { return (int)m; }
int main() { std::printf("%d\\n", mode_code(Mode::Mul)); return 0; }
""",
    "no_program_fnptr.cu": """__global__ void fill(int* x, int n) { int i = threadIdx.x; if (i < n) x[i] = i; }
void run_with(void (*k)(int*, int), int* x, int n) { k<<<1, 128>>>(x, n); }
void run_fill(int* x, int n) { run_with(fill, x, n); }
""",
    "no_program_overload.cu": """__global__ void k(float* y) { y[threadIdx.x] = 0.f; }
void zero(float* y, int n) { k<<<1, n>>>(y); }
void zero(double* y, int n) { }
""",
    "launch_bounds.cu": """#include <cstdio>
__global__ void __launch_bounds__(256, 2) bounded(float* __restrict__ y, const float* __restrict__ x, int n) { int i = blockIdx.x * 256 + threadIdx.x; if (i < n) y[i] = x[i]; }
#ifndef SKIP_EXTRA
__global__ void extra(float* y) { y[0] = 1.f; }
#endif
int main() { std::printf("bounded\\n"); return 0; }
""",
    # ---- C++ programs and snippets ---------------------------------------------------------------
    "cpp_fnptr.cpp": """#include <cstdio>
int square(int x) { return x * x; }
int apply(int (*f)(int), int x) { return f(x); }
int apply_ref(int (&f)(int), int x) { return f(x); }
int main() { std::printf("%d %d\\n", apply(square, 3), apply_ref(square, 4)); return 0; }
""",
    "cpp_struct.cpp": """#include <cstdio>
struct Point { double x, y; };
typedef struct { int w, h; } Size;
double norm2(const Point& p) { return p.x * p.x + p.y * p.y; }
int area(Size s) { return s.w * s.h; }
Point origin() { return Point{0, 0}; }
double dot(const double* a, const double* b, int n) { double s = 0; for (int i = 0; i < n; ++i) s += a[i] * b[i]; return s; }
int main() { Point p{3, 4}; std::printf("%f %d\\n", norm2(p), area(Size{2, 3})); return 0; }
""",
    "cpp_overloads_defaults.cpp": """#include <cstdio>
int clampi(int x, int lo = 0, int hi = 255) { return x < lo ? lo : x > hi ? hi : x; }
double half(double x) { return x / 2; }
float half(float x) { return x / 2; }
void scale(float* y, int n, float a = 2.0f) { for (int i = 0; i < n; ++i) y[i] *= a; }
int main() { std::printf("%d %f\\n", clampi(300), half(3.0)); return 0; }
""",
    "cpp_strings_chars.cpp": """#include <cstdio>
#include <cstring>
int length(const char* s) { return (int)std::strlen(s); }
void upper(char* s, int n) { for (int i = 0; i < n; ++i) if (s[i] >= 'a' && s[i] <= 'z') s[i] -= 32; }
int main(int argc, char** argv) { std::printf("%d\\n", length(argc > 1 ? argv[1] : "hello")); return 0; }
""",
    "cpp_namespaces_extern.cpp": """#include <cstdio>
namespace util { int twice(int x) { return 2 * x; } namespace { int thrice(int x) { return 3 * x; } } }
extern "C" int add_ints(int a, int b) { return a + b; }
extern "C" { long mul_longs(long a, long b) { return a * b; } }
int main() { std::printf("%d %d\\n", util::twice(2), add_ints(1, 2)); return 0; }
""",
    "cpp_templates_macros.cpp": """#include <cstdio>
template <typename T> T maxof(const T* x, int n) { T m = x[0]; for (int i = 1; i < n; ++i) if (x[i] > m) m = x[i]; return m; }
template float maxof<float>(const float*, int);
#define DEFINE_SUM(T, NAME) T NAME(const T* x, int n) { T s = 0; for (int i = 0; i < n; ++i) s += x[i]; return s; }
DEFINE_SUM(float, sum_f)
DEFINE_SUM(int, sum_i)
float mean(const float* x, int n) { float s = 0; for (int i = 0; i < n; ++i) s += x[i]; return s / n; }
int main() { float v[3] = {1, 5, 2}; std::printf("%f %f\\n", maxof(v, 3), mean(v, 3)); return 0; }
""",
    "cpp_globals_static.cpp": """#include <cstdio>
static int calls = 0;
int counter_value() { return calls; }
void bump(int by) { calls += by; }
static void hidden() { ++calls; }
constexpr int kSize = 16;
constexpr int size_of_table() { return kSize; }
int main() { bump(2); hidden(); std::printf("%d\\n", counter_value()); return 0; }
""",
    "cpp_callbacks.cpp": """#include <cstdio>
typedef void (*visitor)(int, void*);
struct Acc { long total; };
static void add_to(int v, void* p) { static_cast<Acc*>(p)->total += v; }
void visit(const int* x, int n, visitor f, void* user) { for (int i = 0; i < n; ++i) f(x[i], user); }
long total_of(const int* x, int n) { Acc a{0}; visit(x, n, add_to, &a); return a.total; }
int main() { int x[4] = {1, 2, 3, 4}; std::printf("%ld\\n", total_of(x, 4)); return 0; }
""",
    "cpp_class_methods.cpp": """#include <cstdio>
class Stack { public: void push(int v) { d_[n_++] = v; } int pop() { return d_[--n_]; } int size() const { return n_; }
 private: int d_[64]; int n_ = 0; };
int drain(Stack& s) { int t = 0; while (s.size()) t += s.pop(); return t; }
int push_range(int n) { Stack s; for (int i = 0; i < n; ++i) s.push(i); return drain(s); }
int main() { std::printf("%d\\n", push_range(5)); return 0; }
""",
}


def _write(tmp_path, name: str, text: str):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_corpus_is_large_and_varied():
    """The corpus has at least 30 snippets, most of them programs, in both languages."""
    assert len(CORPUS) >= 30
    assert sum("int main" in t for t in CORPUS.values()) >= 25
    assert {n.rsplit(".", 1)[1] for n in CORPUS} == {"cu", "cpp"}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(n for n in CORPUS if n.endswith(".cu")))
def test_cuda_snippet_compiles_with_generated_code(tmp_path, use_shared_cache, name):
    """A CUDA snippet (shims included) compiles with nvcc for sm_75, whatever its host signatures."""
    p = _write(tmp_path, name, CORPUS[name])
    b = jitlab.build(p, compile_only=True, arch=["sm_75"], engine="nvcc")
    assert b.compile_only and b.artifact.is_file()
    for fn, why in b.plan.skipped:
        assert why and "\n" not in why, (fn, why)


@pytest.mark.parametrize("name", sorted(n for n in CORPUS if n.endswith(".cpp")))
def test_cpp_snippet_builds_loads_and_runs(tmp_path, use_shared_cache, name):
    """A C++ snippet builds and loads; one with main also runs as a program and exits 0."""
    p = _write(tmp_path, name, CORPUS[name])
    m = jitlab.load(p)
    assert m.functions, m
    if parse_file(p).has_main:
        run = run_program(p, echo=False)
        assert run.ok and run.stdout.strip(), run


def test_function_pointer_helper_is_left_out_with_a_reason(tmp_path, use_shared_cache):
    """A host function taking a function pointer is left out of the module, the reason naming the parameter."""
    m = jitlab.load(_write(tmp_path, "cb.cpp", CORPUS["cpp_fnptr.cpp"]))
    skipped = dict(m.build.plan.skipped)
    assert "square" in m.functions and "apply" not in m.functions
    assert "int (*f)(int)" in skipped["apply"] and "function" in skipped["apply"]
    assert "run_program" in skipped["main"]
    assert m.square(7) == 49


def test_overloads_are_left_out_not_refused(tmp_path, use_shared_cache):
    """Overloaded host functions are left out (Python needs one function per name); the rest stays callable."""
    m = jitlab.load(_write(tmp_path, "ov.cpp", CORPUS["cpp_overloads_defaults.cpp"]))
    assert "half" not in m.functions and "overloaded" in dict(m.build.plan.skipped)["half"]
    assert m.clampi(300) == 255
