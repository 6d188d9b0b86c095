// Solution: scan_brent_kung (lesson 08). The down-sweep uses the up-sweep's indices k = 2d(t + 1) - 1:
// s[k] already holds the prefix up to k (the strides before this one made sure), and s[k + d] holds
// the sum of the d elements ending at k + d, so s[k + d] += s[k] completes it. With 512 elements:
// d = 128 completes s[383]; d = 64 completes s[191], s[319], s[447]; ...; d = 1 every even index but 0.
// The up-sweep does 511 adds and the down-sweep 502: about 2n work, against Kogge-Stone's n log n
// (4097 here), at the price of twice as many steps (17 instead of 9), each with its barrier.

#define BK_THREADS 256
#define BK_TILE (2 * BK_THREADS)  // 512 elements per block

__global__ void scan_brent_kung(float* out, const float* x, int n) {
    __shared__ float s[BK_TILE];
    const int t = threadIdx.x;
    const int base = blockIdx.x * BK_TILE;
    s[t] = base + t < n ? x[base + t] : 0.0f;
    s[t + BK_THREADS] = base + t + BK_THREADS < n ? x[base + t + BK_THREADS] : 0.0f;
    for (int d = 1; d < BK_TILE; d *= 2) {  // up-sweep
        __syncthreads();
        const int k = (t + 1) * 2 * d - 1;
        if (k < BK_TILE) {
            s[k] += s[k - d];
        }
    }
    for (int d = BK_TILE / 4; d > 0; d /= 2) {  // down-sweep
        __syncthreads();
        const int k = (t + 1) * 2 * d - 1;
        if (k + d < BK_TILE) {
            s[k + d] += s[k];
        }
    }
    __syncthreads();
    if (base + t < n) {
        out[base + t] = s[t];
    }
    if (base + t + BK_THREADS < n) {
        out[base + t + BK_THREADS] = s[t + BK_THREADS];
    }
}
