// The RPC methods modeld serves behind the agent: model.* (list, info,
// tokenize, detokenize, forward, generate, load, unload), gpu.* and
// modeld.status. Each handler is an exception boundary: LibTorch throws,
// modeld keeps serving.
#pragma once

#include "model/modeld/model_host.h"
#include "rpc/server.h"

namespace gpubox::modeld {

void add_model_methods(rpc::MethodRegistry& methods, ModelHost& host);

}  // namespace gpubox::modeld
