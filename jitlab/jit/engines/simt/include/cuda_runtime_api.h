// cuda_runtime_api.h for the CPU emulator: jitlab_simt.h (forced in first) has what it declares.
#pragma once
#include "jitlab_simt.h"
