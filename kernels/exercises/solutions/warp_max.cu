// Solution: warp_max (lesson 03). Five shuffle steps fold 32 lanes: after k = 16 lane j holds
// max(v_j, v_j+16), after k = 8 max of 4 values, ... after k = 1 lane 0 has all 32. No shared
// memory and no barrier: the 32 lanes exchange registers in one instruction per step. A lane past
// the end of x must hold the identity of max, -infinity, so it can never win; 0 would win over a
// block of negative numbers. (For a sum the identity is 0.)

__device__ float warp_reduce_max(float v) {
    for (int k = 16; k > 0; k /= 2) {
        v = fmaxf(v, __shfl_down_sync(0xffffffffu, v, k));
    }
    return v;
}

__global__ void warp_max(float* out, const float* x, int n) {
    __shared__ float warp_maxes[32];
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    float v = i < n ? x[i] : -INFINITY;
    v = warp_reduce_max(v);
    if (lane == 0) {
        warp_maxes[warp] = v;
    }
    __syncthreads();
    if (warp == 0) {
        v = lane < blockDim.x / 32 ? warp_maxes[lane] : warp_maxes[0];
        v = warp_reduce_max(v);
        if (lane == 0) {
            out[blockIdx.x] = v;
        }
    }
}
