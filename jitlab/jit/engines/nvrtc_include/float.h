// jitlab's NVRTC stand-in for <float.h> (see <cfloat>).
#pragma once
#include <cfloat>
