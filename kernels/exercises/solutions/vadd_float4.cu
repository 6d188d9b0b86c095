// Solution: vadd_float4 (lesson 01). When n % 4 != 0 the launch has one thread more than there
// are whole float4s (thread n4); it adds the 1 to 3 floats left over, one at a time. A float4
// load of the tail would read past the end of a and b.

__global__ void vadd_float4(float* c, const float* a, const float* b, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int n4 = n / 4;
    if (i < n4) {
        float4 x = reinterpret_cast<const float4*>(a)[i];
        float4 y = reinterpret_cast<const float4*>(b)[i];
        reinterpret_cast<float4*>(c)[i] = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
    } else if (i == n4) {
        for (int k = 4 * n4; k < n; ++k) {
            c[k] = a[k] + b[k];
        }
    }
}
