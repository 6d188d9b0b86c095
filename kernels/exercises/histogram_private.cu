// Exercise (lesson 08): a privatized histogram: count in shared memory, then add to the global one.
//
// hist[b] = how many bytes of x equal b (256 bins, int counts): histogram_private<<<blocks, 256>>>
// with a grid-stride loop, hist zeroed first. Each block counts its bytes into its own 256 bins in
// shared memory (on-chip atomics, shared by 256 threads instead of the whole GPU), then adds each of
// its bins to hist once. The zeroing and the counting are done; the last step is wrong twice over:
// the TODO says where.
//
//   %%cuda histogram_private --exercise       (the cell in 08_scan_histogram)

#define PRIV_BINS 256

__global__ void histogram_private(int* hist, const unsigned char* x, int n) {
    __shared__ int bins[PRIV_BINS];
    for (int b = threadIdx.x; b < PRIV_BINS; b += blockDim.x) {
        bins[b] = 0;  // shared memory starts with whatever the previous block on this SM left there
    }
    __syncthreads();
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        atomicAdd(&bins[x[i]], 1);
    }
    // TODO: (1) thread b reads bins[b] while other warps may still be counting into it;
    // (2) every block writes its own counts over the other blocks'.
    for (int b = threadIdx.x; b < PRIV_BINS; b += blockDim.x) {
        hist[b] = bins[b];
    }
}
