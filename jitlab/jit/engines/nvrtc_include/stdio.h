// jitlab's NVRTC stand-in for <stdio.h>: NVRTC has no C++ standard library headers, and what this header
// gives device code (printf, assert, the CUDA math functions) NVRTC declares built in.
#pragma once
