// Exercise (lesson 01): float4 loads, and the tail.
//
// c = a + b for n floats, each thread taking one float4 (4 floats: one 16-byte load per input),
// so a warp moves 512 B per load instruction instead of 128 B: a quarter of the instructions for
// the same bytes. The launch has one thread per float4, the last one partial:
// vadd_float4<<<ceil(ceil(n / 4) / 256), 256>>>. float4 needs 16-byte aligned pointers; torch's
// allocations are. The n / 4 whole float4s are done; the last n % 4 floats are not.
//
//   %%cuda vadd_float4 --exercise            (the cell in 01_vector_add)

__global__ void vadd_float4(float* c, const float* a, const float* b, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;  // which float4
    int n4 = n / 4;                                  // whole float4s
    if (i < n4) {
        float4 x = reinterpret_cast<const float4*>(a)[i];
        float4 y = reinterpret_cast<const float4*>(b)[i];
        reinterpret_cast<float4*>(c)[i] = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
    }
    // TODO: the last n % 4 floats, elements 4 * n4 ... n - 1, are never written
}
