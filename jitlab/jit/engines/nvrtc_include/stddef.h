// jitlab's NVRTC stand-in for <stddef.h> (see <cstddef>).
#pragma once
#include <cstddef>
