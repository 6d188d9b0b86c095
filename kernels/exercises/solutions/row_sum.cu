// Solution: row_sum (lesson 03). 8 steps for 256 values: 128 threads add s[t + 128] to s[t], then
// 64 add s[t + 64], ... The __syncthreads() inside the loop is what makes it right: in step k a
// thread reads s[t + k], which another thread (usually of another warp) wrote in the step before.
// It sits outside the `if`: every thread of the block has to reach the same barrier.

#define ROW_BLOCK 256

__global__ void row_sum(float* out, const float* x, int rows, int cols) {
    __shared__ float s[ROW_BLOCK];
    const int t = threadIdx.x;
    const float* row = x + (size_t)blockIdx.x * cols;
    float v = 0.0f;
    for (int c = t; c < cols; c += blockDim.x) {
        v += row[c];
    }
    s[t] = v;
    __syncthreads();
    for (int k = blockDim.x / 2; k > 0; k /= 2) {
        if (t < k) {
            s[t] += s[t + k];
        }
        __syncthreads();
    }
    if (t == 0) {
        out[blockIdx.x] = s[0];
    }
}
