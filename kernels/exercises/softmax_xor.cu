// Exercise (lesson 07): a warp all-reduce, so every lane has the answer.
//
// y[r, :] = softmax(x[r, :]), one warp per row: softmax_xor<<<ceil(rows / 4), 128>>>. Lane l takes
// columns l, l + 32, ...; the warp then needs the row's max and sum in EVERY lane, since every lane
// writes its own columns. Lesson 03's reduction uses __shfl_down_sync: lane i adds the value of lane
// i + k, so after 5 steps lane 0 holds the total, but lane 1 misses lane 0's part and lane 31 only
// ever saw its own. __shfl_xor_sync(mask, v, k) instead swaps v between lanes i and i ^ k: a
// butterfly, after which all 32 lanes hold the same total (5 steps, no extra broadcast).
//
//   %%cuda softmax_xor --exercise            (the cell in 07_softmax_layernorm)

__device__ float warp_max(float v) {
    // TODO: every lane must end with the max of all 32 lanes, not only lane 0
    for (int k = 16; k > 0; k /= 2) {
        v = fmaxf(v, __shfl_down_sync(0xffffffffu, v, k));
    }
    return v;
}

__device__ float warp_sum(float v) {
    // TODO: the same for the sum
    for (int k = 16; k > 0; k /= 2) {
        v += __shfl_down_sync(0xffffffffu, v, k);
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
