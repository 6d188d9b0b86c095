// jitlab's NVRTC stand-in for <stdint.h> (see <cstdint>).
#pragma once
#include <cstdint>
