// Exercise (lesson 03): fix the race.
//
// out[0] += the sum of x[0..n), with many blocks: sum_race<<<ceil(n / 256), 256>>>, out zeroed
// first. Block b sums its 256 elements with the shared-memory tree (that part is right), then
// thread 0 of every block adds the block's sum to out[0]. With one block the result is right;
// with thousands it is not, and it changes from run to run.
//
//   %%cuda sum_race --exercise               (the cell in 03_reduction)

#define SUM_BLOCK 256

__global__ void sum_race(float* out, const float* x, int n) {
    __shared__ float s[SUM_BLOCK];
    const int t = threadIdx.x;
    const int i = blockIdx.x * blockDim.x + t;
    s[t] = i < n ? x[i] : 0.0f;
    __syncthreads();
    for (int k = blockDim.x / 2; k > 0; k /= 2) {
        if (t < k) {
            s[t] += s[t + k];
        }
        __syncthreads();
    }
    if (t == 0) {
        out[0] += s[0];  // TODO: read out[0], add, write back: what if another block does the same meanwhile?
    }
}
