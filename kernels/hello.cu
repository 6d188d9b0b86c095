#include <stdio.h>
__global__ void kernel()
{
printf("hello world");
}
