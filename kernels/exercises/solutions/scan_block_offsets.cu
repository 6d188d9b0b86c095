// Solution: scan_block_offsets (lesson 08). offsets is an inclusive scan of the block sums, so
// offsets[b] counts block b too; block b needs the blocks before it, offsets[b - 1], and block 0
// needs nothing. (With an exclusive scan of the block sums, block b would add entry b: the same
// off-by-one, moved.) This is versions 1 and 2 of kernels/scan.cu: the scan reads and writes n floats,
// the adds read and write them again: 4n words, twice what an ideal scan moves.

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
    if (i < n && blockIdx.x > 0) {
        out[i] += offsets[blockIdx.x - 1];
    }
}
