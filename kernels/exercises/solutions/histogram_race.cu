// Solution: histogram_race (lesson 08). `hist[b] += 1` is a load, an add and a store; the 32 lanes of
// a warp that find the same byte load the same old count together and all store old + 1, so 32
// increments become one (and threads of other warps and blocks lose theirs the same way).
// atomicAdd makes the three steps one indivisible operation, done in the L2 cache. Correct, but
// every byte is now a global atomic, and all bytes of one value queue on one address: version 2 of
// kernels/histogram.cu counts in shared memory first.

__global__ void histogram_race(int* hist, const unsigned char* x, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        atomicAdd(&hist[x[i]], 1);
    }
}
