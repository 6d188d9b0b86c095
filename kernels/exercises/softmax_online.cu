// Exercise (lesson 07): online softmax, the rescale.
//
// y[r, :] = softmax(x[r, :]), one warp per row: softmax_online<<<ceil(rows / 4), 128>>>. One pass
// over the row keeps, per lane, a running max m and s = the sum of exp(x_i - m) over the elements
// seen so far; warp_merge combines the 32 lanes' (m, s); a second pass writes exp(x - m) / s. So x is
// read twice instead of three times (max, sum, write). The catch is in online_add: s is a sum of
// exp(x_i - m) for the m of the moment, so when a new element raises m, every term already in s is
// relative to the old max and too large by exp(m_new - m_old).
//
//   %%cuda softmax_online --exercise         (the cell in 07_softmax_layernorm)

// Adds x to the state (m, s) of the elements seen so far. Start: m = -INFINITY, s = 0.
__device__ void online_add(float& m, float& s, float x) {
    if (x > m) {
        // TODO: the terms in s are exp(x_i - m); from now on they must be exp(x_i - x)
        s += 1.0f;  // x's own term: exp(x - x) = 1
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
