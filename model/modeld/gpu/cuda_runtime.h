// The CUDA side of LibTorch, loaded at run time: modeld links libtorch_cpu
// only, so one binary runs on a CPU machine and, where a driver and the
// wheel's CUDA libraries exist, on a GPU. Thread-safe (loads once).
#pragma once

#include "base/status.h"

namespace gpubox::modeld {

// Loads libtorch_cuda.so (once) so that cuda devices exist, and turns off
// cuDNN's attention (it rebuilds per key length); an error says why not.
Status enable_cuda();
int cuda_device_count();

}  // namespace gpubox::modeld
