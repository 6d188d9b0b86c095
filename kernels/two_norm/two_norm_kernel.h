void launch_two_norm(const float *a,const float *b,float *c, int n, int m);

// Version 1 (any size, deterministic): c[0] = ||a - b||_2 over n floats, two passes on `stream`
// (a cudaStream_t). partials holds two_norm1_blocks(n) doubles of scratch; pass that count as
// blocks. Returns nullptr, or the CUDA error's description if a launch failed.
#include <cstdint>
int two_norm1_blocks(int64_t n);
const char* launch_two_norm1(const float* a, const float* b, float* c, double* partials, int blocks,
                             int64_t n, void* stream);
