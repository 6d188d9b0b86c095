// Solution: softmax_xor (lesson 07). __shfl_xor_sync pairs lane i with lane i ^ k: at k = 16 lanes
// 0-15 and 16-31 swap and both halves hold pairwise results, at k = 8 quarters, ... after k = 1 every
// lane has combined all 32 values, in the same 5 steps as the down-shuffle. (Keeping
// __shfl_down_sync and broadcasting lane 0's result with v = __shfl_sync(0xffffffff, v, 0) also works,
// at one more shuffle.) Lanes i and i ^ k add the same two numbers (a + b = b + a exactly), so all 32
// lanes even hold bit-identical sums.

__device__ float warp_max(float v) {
    for (int k = 16; k > 0; k /= 2) {
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, k));  // lanes i and i ^ k swap values
    }
    return v;
}

__device__ float warp_sum(float v) {
    for (int k = 16; k > 0; k /= 2) {
        v += __shfl_xor_sync(0xffffffffu, v, k);
    }
    return v;
}

__global__ void softmax_xor(float* y, const float* x, int rows, int cols) {
    const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= rows) {
        return;
    }
    const float* xr = x + (size_t)row * cols;
    float* yr = y + (size_t)row * cols;
    float m = -INFINITY;
    for (int c = lane; c < cols; c += 32) {
        m = fmaxf(m, xr[c]);
    }
    m = warp_max(m);
    float s = 0.0f;
    for (int c = lane; c < cols; c += 32) {
        s += expf(xr[c] - m);
    }
    s = warp_sum(s);
    for (int c = lane; c < cols; c += 32) {
        yr[c] = expf(xr[c] - m) / s;
    }
}
