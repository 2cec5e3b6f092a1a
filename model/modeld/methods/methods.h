// The RPC methods modeld serves behind the agent: model.* (list, info,
// tokenize, detokenize, forward, run, hooks, generate, load, unload, sae_load,
// sae_unload, saes, weights, fn_load, fn_unload, fns), gpu.* and
// modeld.status. Each handler is an exception boundary: LibTorch throws,
// modeld keeps serving.
#pragma once

#include <nlohmann/json.hpp>

#include "base/thread_annotations.h"
#include "model/modeld/registry/model_registry.h"
#include "rpc/server.h"

namespace gpubox::modeld {

// The gpu.probe result measured when modeld started on a GPU machine (null until then).
struct StartupProbe {
  Mutex mutex;
  nlohmann::json result GUARDED_BY(mutex);
};

void add_modeld_methods(rpc::MethodRegistry& methods, ModelRegistry& registry, StartupProbe& probe);

// model.sae_load, model.sae_unload, model.saes (sae_methods.cpp).
void add_sae_methods(rpc::MethodRegistry& methods, ModelRegistry& registry);
// model.fn_load, model.fn_unload, model.fns: the fn op's functions kept under a name (fn_methods.cpp).
void add_fn_methods(rpc::MethodRegistry& methods, ModelRegistry& registry);
// model.weights: parameters in TransformerLens' names and shapes (weight_methods.cpp).
void add_weight_methods(rpc::MethodRegistry& methods, ModelRegistry& registry);

}  // namespace gpubox::modeld
