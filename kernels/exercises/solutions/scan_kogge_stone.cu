// Solution: scan_kogge_stone (lesson 08). Two buffers: each step reads buf[cur] and writes
// buf[cur ^ 1], so no thread can read a value some other thread already changed in this step, and
// one __syncthreads() per step suffices (the next step reads what this one wrote, and writes what
// this one read only after everyone got past the barrier). In place, `s[t] += s[t - d]` is a race:
// it is right only when every warp happens to read before any warp writes. 8 steps of up to 256
// adds: 1793 adds for 256 elements, where a serial scan needs 255 (work n log n, not n).

#define KS_BLOCK 256

__global__ void scan_kogge_stone(float* out, const float* x, int n) {
    __shared__ float buf[2][KS_BLOCK];
    const int t = threadIdx.x;
    const int i = blockIdx.x * blockDim.x + t;
    int cur = 0;
    buf[cur][t] = i < n ? x[i] : 0.0f;
    __syncthreads();
    for (int d = 1; d < blockDim.x; d *= 2) {
        float v = buf[cur][t];
        if (t >= d) {
            v += buf[cur][t - d];
        }
        buf[cur ^ 1][t] = v;
        cur ^= 1;
        __syncthreads();
    }
    if (i < n) {
        out[i] = buf[cur][t];
    }
}
