// Exercise (lesson 07): merge two Welford states (count, mean, M2).
//
// Layer norm of every row, y = (x - mean) / sqrt(var + eps) * w + b, one warp per row:
// welford_merge<<<ceil(rows / 4), 128>>>. Each lane runs Welford's update over its columns (l, l + 32,
// ...): n values, their mean, and M2 = the sum of (x - mean)^2, so var = M2 / n, in one pass and
// without the cancellation of E[x^2] - mean^2. Then the 32 lanes' states are merged with shuffles,
// and merge() is the part to write: two parts of the row, (n, mean, M2) and (nb, meanb, M2b), as one.
// Either part may be empty (n = 0: a lane with no columns when the row is short).
//
//   %%cuda welford_merge --exercise          (the cell in 07_softmax_layernorm)

// One more value x into the state (n, mean, m2). Start: 0, 0, 0.
__device__ void welford_add(float& n, float& mean, float& m2, float x) {
    n += 1.0f;
    const float d = x - mean;
    mean += d / n;
    m2 += d * (x - mean);
}

// (n, mean, m2) becomes the state of both parts together.
__device__ void merge(float& n, float& mean, float& m2, float nb, float meanb, float m2b) {
    // TODO: right only when both parts have the same count and the same mean. The merged mean weighs
    // each part by its count; M2 adds, plus the spread between the two means: delta^2 n nb / (n + nb)
    mean = 0.5f * (mean + meanb);
    m2 = m2 + m2b;
    n = n + nb;
}

__global__ void welford_merge(float* y, const float* x, const float* w, const float* b, int rows, int cols,
                              float eps) {
    const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= rows) {
        return;
    }
    const float* xr = x + (size_t)row * cols;
    float* yr = y + (size_t)row * cols;
    float n = 0.0f, mean = 0.0f, m2 = 0.0f;
    for (int c = lane; c < cols; c += 32) {
        welford_add(n, mean, m2, xr[c]);
    }
    for (int k = 16; k > 0; k /= 2) {  // a butterfly: every lane ends with the whole row's state
        const float nb = __shfl_xor_sync(0xffffffffu, n, k);
        const float meanb = __shfl_xor_sync(0xffffffffu, mean, k);
        const float m2b = __shfl_xor_sync(0xffffffffu, m2, k);
        merge(n, mean, m2, nb, meanb, m2b);
    }
    const float rstd = rsqrtf(m2 / n + eps);
    for (int c = lane; c < cols; c += 32) {
        yr[c] = (xr[c] - mean) * rstd * w[c] + b[c];
    }
}
