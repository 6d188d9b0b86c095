// Included before every NVRTC program: what nvcc's implicit <cuda_runtime.h> (and, through it,
// the host's <math.h>) gives a kernel that includes nothing, and NVRTC does not.
#pragma once
#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif
#ifndef NAN
#define NAN __int_as_float(0x7fffffff)
#endif
#ifndef HUGE_VALF
#define HUGE_VALF INFINITY
#endif
#ifndef HUGE_VAL
#define HUGE_VAL __longlong_as_double(0x7ff0000000000000LL)
#endif
