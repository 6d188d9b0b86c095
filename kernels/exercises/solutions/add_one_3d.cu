// Solution: add_one_3d (lesson 02). z works like x and y; the flat index counts z whole
// height x width slices, then y whole rows, then x.

__global__ void add_one_3d(float* dst, const float* src, int depth, int height, int width) {
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    int z = blockIdx.z * blockDim.z + threadIdx.z;
    if (x < width && y < height && z < depth) {
        int idx = (z * height + y) * width + x;
        dst[idx] = src[idx] + 1.0f;
    }
}
