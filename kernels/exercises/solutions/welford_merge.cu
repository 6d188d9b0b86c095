// Solution: welford_merge (lesson 07). Chan et al.'s parallel formula: with delta = meanb - mean,
//   mean_ab = mean + delta nb / (n + nb)       (the count-weighted mean)
//   M2_ab   = M2 + M2b + delta^2 n nb / (n + nb)
// The last term is what each part's squares miss: they were taken around their own means, not the
// merged one. An empty part (nb = 0) leaves the state unchanged, and two empty ones are skipped
// before the 0 / 0. Written with fb = nb / (n + nb), no large product like n mean is ever formed.

// One more value x into the state (n, mean, m2). Start: 0, 0, 0.
__device__ void welford_add(float& n, float& mean, float& m2, float x) {
    n += 1.0f;
    const float d = x - mean;
    mean += d / n;
    m2 += d * (x - mean);
}

// (n, mean, m2) becomes the state of both parts together.
__device__ void merge(float& n, float& mean, float& m2, float nb, float meanb, float m2b) {
    const float nn = n + nb;
    if (nn == 0.0f) {
        return;  // both empty: nothing to merge (and 0 / 0 below would be NaN)
    }
    const float delta = meanb - mean;
    const float fb = nb / nn;  // b's share of the values
    mean += delta * fb;        // = (n mean + nb meanb) / (n + nb)
    m2 += m2b + delta * delta * n * fb;
    n = nn;
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
