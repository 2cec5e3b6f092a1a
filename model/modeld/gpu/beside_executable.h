// The shared libraries modeld keeps beside its own executable and loads only
// when a model needs them (libgpubox_step_graph.so, libgpubox_nccl_ranks.so).
#pragma once

#include <string>
#include <string_view>

namespace gpubox::modeld {

// dlopen(RTLD_NOW | RTLD_LOCAL) of NAME in the directory of /proc/self/exe, then
// dlsym of SYMBOL; null, and in error the path and dlerror() or the missing
// symbol, when either fails. The library stays loaded for the process's life.
void* load_beside_executable(std::string_view name, const char* symbol, std::string& error);

}  // namespace gpubox::modeld
