// Exercise (lesson 08): the histogram race.
//
// hist[b] = how many bytes of x equal b (256 bins, int counts), one byte per thread:
// histogram_race<<<ceil(n / 256), 256>>>, hist zeroed first. Many threads find the same byte and
// increment the same bin at the same moment. Run it as it is first: the counts come out far too low
// when many bytes are equal (the test data has all bytes equal, and random bytes).
//
//   %%cuda histogram_race --exercise          (the cell in 08_scan_histogram)

__global__ void histogram_race(int* hist, const unsigned char* x, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        hist[x[i]] += 1;  // TODO: load, add, store: what if 32 lanes of a warp (or other blocks) do it to the same bin?
    }
}
