// Solution: softmax_stable (lesson 07). Each lane takes the max over its columns (-INFINITY, the
// identity of max, for a lane with none), warp_max gives every lane the row's max, and every exp
// then sees x - m <= 0: at most 1, never inf. The answer is the same, since the factor exp(-m) cancels
// between the numerator and the sum. A row that is all -inf still gives NaN (as torch does): no
// element is more likely than another.

__device__ float warp_sum(float v) {
    for (int k = 16; k > 0; k /= 2) {
        v += __shfl_xor_sync(0xffffffffu, v, k);
    }
    return v;  // in every lane
}

__device__ float warp_max(float v) {
    for (int k = 16; k > 0; k /= 2) {
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, k));
    }
    return v;  // in every lane
}

__global__ void softmax_stable(float* y, const float* x, int rows, int cols) {
    const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;  // this warp's row
    const int lane = threadIdx.x % 32;
    if (row >= rows) {
        return;  // the whole warp leaves together
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
