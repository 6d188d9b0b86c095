// Exercise (lesson 01): the grid-stride loop (seed 001's add2_kernel).
//
// c = a + b for n floats. This launch does not size the grid to the data: it is always
// vadd_grid_stride<<<8, 128>>>, 1024 threads, whatever n is (in real code: a grid sized to the
// machine, SMs x blocks per SM). One element per thread covers only the first 1024 elements.
//
//   %%cuda vadd_grid_stride --exercise       (the cell in 01_vector_add)

__global__ void vadd_grid_stride(float* c, const float* a, const float* b, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {  // TODO: make every thread go on to i + (threads in the grid), i + 2 x that, ... while < n
        c[i] = a[i] + b[i];
    }
}
