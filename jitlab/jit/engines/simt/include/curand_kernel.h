// curand_kernel.h for jitlab's CPU emulator: the curand device API over a per-thread xorwow generator.
// Same names, types and ranges as CUDA's (uniform in (0, 1], normal with mean 0 and deviation 1);
// the numbers are not the GPU's own sequence, so a kernel that checks exact random values differs.
#pragma once
#include "jitlab_simt.h"

struct curandStateXORWOW {
    unsigned d, v[5];
    int has_normal;
    float normal;
    double normal_double;
};
typedef curandStateXORWOW curandState_t;
typedef curandStateXORWOW curandState;
typedef curandStateXORWOW curandStatePhilox4_32_10_t;
typedef curandStateXORWOW curandStateMRG32k3a_t;

namespace jitlab_simt {
inline uint64_t splitmix(uint64_t& x) {
    uint64_t z = (x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
}  // namespace jitlab_simt

inline unsigned curand(curandStateXORWOW* s) {
    unsigned t = s->v[0] ^ (s->v[0] >> 2);
    s->v[0] = s->v[1], s->v[1] = s->v[2], s->v[2] = s->v[3], s->v[3] = s->v[4];
    s->v[4] = (s->v[4] ^ (s->v[4] << 4)) ^ (t ^ (t << 1));
    s->d += 362437;
    return s->v[4] + s->d;
}
inline void skipahead(unsigned long long n, curandStateXORWOW* s) {
    for (unsigned long long i = 0; i < n; ++i) curand(s);
}
/// Each (seed, subsequence) pair gets its own stream; `offset` skips that many draws.
inline void curand_init(unsigned long long seed, unsigned long long subsequence, unsigned long long offset,
                        curandStateXORWOW* s) {
    uint64_t x = seed ^ (subsequence * 0xd1b54a32d192ed03ull);
    for (int i = 0; i < 5; ++i) {
        s->v[i] = (unsigned)jitlab_simt::splitmix(x);
        if (!s->v[i]) s->v[i] = 0x6c078965u;
    }
    s->d = 6615241u;
    s->has_normal = 0;
    skipahead(offset, s);
}
inline float curand_uniform(curandStateXORWOW* s) { return (float)((curand(s) >> 8) + 1u) * (1.0f / 16777216.0f); }
inline double curand_uniform_double(curandStateXORWOW* s) {
    uint64_t hi = curand(s), lo = curand(s);
    return (double)(((hi << 21) ^ lo) & ((1ull << 53) - 1) | 1ull) / 9007199254740992.0;
}
inline float2 curand_normal2(curandStateXORWOW* s) {
    float u = curand_uniform(s), v = curand_uniform(s);
    float r = sqrtf(-2.0f * logf(u));
    return {r * cosf(6.2831853f * v), r * sinf(6.2831853f * v)};
}
inline float curand_normal(curandStateXORWOW* s) {
    if (s->has_normal) {
        s->has_normal = 0;
        return s->normal;
    }
    float2 p = curand_normal2(s);
    s->has_normal = 1, s->normal = p.y;
    return p.x;
}
inline double curand_normal_double(curandStateXORWOW* s) {
    double u = curand_uniform_double(s), v = curand_uniform_double(s);
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}
inline float curand_log_normal(curandStateXORWOW* s, float mean, float stddev) {
    return expf(mean + stddev * curand_normal(s));
}
inline unsigned curand_poisson(curandStateXORWOW* s, double lambda) {  // Knuth's, fine for the small lambdas of exercises
    double l = exp(-lambda), p = 1.0;
    unsigned k = 0;
    do { ++k; p *= curand_uniform_double(s); } while (p > l);
    return k - 1;
}
