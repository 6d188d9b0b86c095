// Exercise (lesson 02): a 3-D grid.
//
// dst = src + 1 for a depth x height x width tensor (row-major: element (z, y, x) is at
// (z * height + y) * width + x), one thread per element, blocks of 8 x 8 x 4 threads and
// add_one_3d<<<dim3(ceil(width / 8), ceil(height / 8), ceil(depth / 4)), dim3(8, 8, 4)>>>.
// As written every thread works on slice z = 0, whatever its z: the other slices are never written.
//
//   %%cuda add_one_3d --exercise             (the cell in 02_2d_indexing)

__global__ void add_one_3d(float* dst, const float* src, int depth, int height, int width) {
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    // TODO: this thread's z, its bounds check, and z in the flat index
    if (x < width && y < height) {
        int idx = y * width + x;
        dst[idx] = src[idx] + 1.0f;
    }
}
