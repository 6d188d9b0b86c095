// Exercise (lesson 08): from block scans to a scan of the whole array.
//
// out = the inclusive scan of all n elements, in three launches (scan_block_offsets.ref.py makes them):
//   1. scan_block<<<ceil(n / 256), 256>>> scans each block of 256 on its own and writes the block's
//      total to block_sums[b] (done, with warp shuffles);
//   2. offsets = torch.cumsum(block_sums): offsets[b] = block_sums[0] + ... + block_sums[b];
//   3. scan_add_offsets<<<ceil(n / 256), 256>>> adds to every element of block b the total of all
//      the blocks before it. Step 3's index is wrong: the TODO says where.
//
//   %%cuda scan_block_offsets --exercise      (the cell in 08_scan_histogram)

#define SB_BLOCK 256

__global__ void scan_block(float* out, float* block_sums, const float* x, int n) {
    __shared__ float warp_totals[SB_BLOCK / 32];
    const int t = threadIdx.x, lane = t % 32, warp = t / 32;
    const int i = blockIdx.x * blockDim.x + t;
    float v = i < n ? x[i] : 0.0f;
    for (int d = 1; d < 32; d *= 2) {  // inclusive scan of the warp's 32 values
        const float left = __shfl_up_sync(0xffffffffu, v, d);
        if (lane >= d) {
            v += left;
        }
    }
    if (lane == 31) {
        warp_totals[warp] = v;
    }
    __syncthreads();
    for (int w = 0; w < warp; ++w) {  // plus the totals of the warps to the left
        v += warp_totals[w];
    }
    if (i < n) {
        out[i] = v;
    }
    if (t == blockDim.x - 1) {
        block_sums[blockIdx.x] = v;
    }
}

__global__ void scan_add_offsets(float* out, const float* offsets, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        out[i] += offsets[blockIdx.x];  // TODO: offsets[b] includes block b itself. What comes before block 0?
    }
}
