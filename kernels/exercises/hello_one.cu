// Exercise (lesson 00): one thread speaks.
//
// The launch is hello_one<<<2, 4>>>: 2 blocks of 4 threads, 8 threads in all, and every one of
// them runs this function. Make only thread 3 of block 1 print, so that the whole output is
//     hello from block 1, thread 3
//
//   %%cuda hello_one --exercise              (the cell in 00_setup_and_hello)
//   jitlab.exercises.check("hello_one")      (the same check from Python)
#include <cstdio>

__global__ void hello_one() {
    // TODO: every thread prints; let only threadIdx.x == 3 of blockIdx.x == 1 do it
    printf("hello from block %d, thread %d\n", (int)blockIdx.x, (int)threadIdx.x);
}
