// Exercise (lesson 08): the Brent-Kung down-sweep.
//
// out[i] = x[512 b] + ... + x[i] for every element i of block b (each block of 512 elements scanned
// on its own), two elements per thread: scan_brent_kung<<<ceil(n / 512), 256>>>. The up-sweep (a
// reduction tree) is done: at stride d = 1, 2, ..., 256 thread t adds s[k - d] into s[k] for
// k = 2d(t + 1) - 1, so afterwards s[k] holds the sum of the 2d elements ending at k, and s[511] the
// block's total. Only the elements at k = 2^j - 1 hold full prefixes now. The down-sweep, at strides
// d = 128, 64, ..., 1, hands each full prefix on to the element d places to its right, which so far
// holds only the sum of its own d elements. It is missing: the TODO says where.
//
//   %%cuda scan_brent_kung --exercise         (the cell in 08_scan_histogram)

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
        // TODO: which thread touches which element? Thread t holds a full prefix at k = 2d(t + 1) - 1
        // (as in the up-sweep); it adds it to the element d places to the right, if that is in the block.
    }
    __syncthreads();
    if (base + t < n) {
        out[base + t] = s[t];
    }
    if (base + t + BK_THREADS < n) {
        out[base + t + BK_THREADS] = s[t + BK_THREADS];
    }
}
