// model.generate: new tokens for one prompt or a batch, on the model's
// scheduler, with ops, stop strings and streaming (rpc/PROTOCOL.md).
#pragma once

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "model/modeld/registry/model_registry.h"
#include "rpc/call.h"

namespace gpubox::modeld {

Result<nlohmann::json> generate_method(ModelRegistry& registry, rpc::CallContext& ctx);

}  // namespace gpubox::modeld
