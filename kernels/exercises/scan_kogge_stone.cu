// Exercise (lesson 08): a Kogge-Stone scan step that never reads a value written in the same step.
//
// out[i] = x[256 b] + ... + x[i] for every element i of block b (each block of 256 elements scanned
// on its own), one element per thread: scan_kogge_stone<<<ceil(n / 256), 256>>>. Kogge-Stone: in
// step d = 1, 2, 4, ..., 128 every element adds the element d places to its left (if there is one);
// after the 8 steps element t holds s[0] + ... + s[t]. The steps are missing: the TODO says where.
//
//   %%cuda scan_kogge_stone --exercise        (the cell in 08_scan_histogram)

#define KS_BLOCK 256

__global__ void scan_kogge_stone(float* out, const float* x, int n) {
    __shared__ float s[KS_BLOCK];
    const int t = threadIdx.x;
    const int i = blockIdx.x * blockDim.x + t;
    s[t] = i < n ? x[i] : 0.0f;
    __syncthreads();
    for (int d = 1; d < blockDim.x; d *= 2) {
        // TODO: s[t] += s[t - d] for t >= d. But thread t reads s[t - d] while thread t - d may already
        // have added to it in this same step (its warp can run ahead). Write this step's results to a
        // second buffer (then swap the two), or read into a register, __syncthreads(), then write.
        __syncthreads();
    }
    if (i < n) {
        out[i] = s[t];
    }
}
