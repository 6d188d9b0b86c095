// Exercise (lesson 01): the bounds check.
//
// c = a + b for n floats, one element per thread. The launch rounds up to whole blocks:
// vadd_bounds<<<ceil(n / 256), 256>>>, so n = 1000 gets 4 x 256 = 1024 threads and the last 24
// have no element. As written they add and store anyway, past the end of a, b and c: in a real
// program that overwrites whatever tensor lives there, silently. (The checker puts a guard zone
// behind c and reports anything written into it.)
//
//   %%cuda vadd_bounds --exercise            (the cell in 01_vector_add)

__global__ void vadd_bounds(float* c, const float* a, const float* b, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    c[i] = a[i] + b[i];  // TODO: only a thread that has an element may touch memory
}
