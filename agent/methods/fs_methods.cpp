#include "agent/methods/methods.h"

namespace gpubox {

void add_fs_methods(rpc::MethodRegistry&) {}

}  // namespace gpubox
