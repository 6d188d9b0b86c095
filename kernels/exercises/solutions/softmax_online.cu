// Solution: softmax_online (lesson 07). When x raises the max, every term in s was exp(x_i - m_old);
// multiplying s by exp(m_old - x) turns each into exp(x_i - x), and x's own term is exp(0) = 1. The
// first element finds m = -INFINITY and s = 0: 0 * exp(-inf) = 0, so no special case. merge() is the
// same rescale for two partial sums at once, and the write pass uses the final (m, s).

// Adds x to the state (m, s) of the elements seen so far. Start: m = -INFINITY, s = 0.
__device__ void online_add(float& m, float& s, float x) {
    if (x > m) {
        s = s * expf(m - x) + 1.0f;  // old terms: exp(x_i - m) * exp(m - x) = exp(x_i - x); x's own: 1
        m = x;
    } else if (x > -INFINITY) {  // a -inf adds exp(-inf) = 0 (and -inf - -inf would be NaN)
        s += expf(x - m);
    }
}

// The state of two sets together: both sums rescaled to the larger max (which is right here).
__device__ void merge(float& m, float& s, float m2, float s2) {
    const float mm = fmaxf(m, m2);
    const float base = mm == -INFINITY ? 0.0f : mm;  // both empty: keep s = 0, not NaN
    s = s * expf(m - base) + s2 * expf(m2 - base);
    m = mm;
}

__device__ void warp_merge(float& m, float& s) {
    for (int k = 16; k > 0; k /= 2) {
        const float m2 = __shfl_xor_sync(0xffffffffu, m, k);
        const float s2 = __shfl_xor_sync(0xffffffffu, s, k);
        merge(m, s, m2, s2);
    }
}

__global__ void softmax_online(float* y, const float* x, int rows, int cols) {
    const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= rows) {
        return;
    }
    const float* xr = x + (size_t)row * cols;
    float* yr = y + (size_t)row * cols;
    float m = -INFINITY, s = 0.0f;
    for (int c = lane; c < cols; c += 32) {
        online_add(m, s, xr[c]);
    }
    warp_merge(m, s);  // every lane now holds the row's (m, s)
    for (int c = lane; c < cols; c += 32) {
        yr[c] = expf(xr[c] - m) / s;
    }
}
