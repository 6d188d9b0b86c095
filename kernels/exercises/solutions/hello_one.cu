// Solution: hello_one (lesson 00). Every thread runs the kernel; an `if` on its own coordinates
// decides which ones act. This is the same mechanism as the bounds check of lesson 01.
#include <cstdio>

__global__ void hello_one() {
    if (blockIdx.x == 1 && threadIdx.x == 3) {
        printf("hello from block %d, thread %d\n", (int)blockIdx.x, (int)threadIdx.x);
    }
}
