// Exercise (lesson 03): a warp-shuffle reduction, and the identity of max.
//
// out[b] = the largest of x[256 b ... 256 b + 255] (the last block may have fewer), one element
// per thread: warp_max<<<ceil(n / 256), 256>>>. Inside a warp the 32 lanes can combine values
// without shared memory or __syncthreads(): __shfl_down_sync(0xffffffff, v, k) returns the v of
// the lane k above (lanes past 31 get their own v back). Shared memory is needed only for the
// block's 8 warp results. Two things are missing; the TODOs say where.
//
//   %%cuda warp_max --exercise               (the cell in 03_reduction)

__device__ float warp_reduce_max(float v) {
    // TODO: 5 steps, k = 16, 8, 4, 2, 1, each taking the max with the value k lanes up;
    // lane 0 ends up with the warp's max
    return v;
}

__global__ void warp_max(float* out, const float* x, int n) {
    __shared__ float warp_maxes[32];  // one per warp (a block has at most 32)
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    float v = i < n ? x[i] : 0.0f;  // TODO: is 0 the right value for a lane past the end? (all x < 0?)
    v = warp_reduce_max(v);
    if (lane == 0) {
        warp_maxes[warp] = v;
    }
    __syncthreads();
    if (warp == 0) {
        v = lane < blockDim.x / 32 ? warp_maxes[lane] : warp_maxes[0];  // lanes past the 8th repeat a real value
        v = warp_reduce_max(v);
        if (lane == 0) {
            out[blockIdx.x] = v;
        }
    }
}
