// What callers loaded into a ready model at run time (its functions and SAEs),
// read out for PersistedLoads and loaded again into the same model after a
// modeld restart. A function or SAE that no longer loads is logged and dropped;
// it never fails its model. Any thread.
#pragma once

#include <string>
#include <vector>

#include "model/modeld/registry/model_registry.h"
#include "model/modeld/registry/persisted_loads.h"

namespace gpubox::modeld {

// The model's functions (every name and its sessions) and SAEs now.
ModelLoads loads_of(const LoadedModel& model);

// The SAEs of a model's modeld.json entry still loaded when kept was saved (same name and path):
// one unloaded since stays unloaded.
std::vector<SaeLoadSpec> spec_saes_kept(const std::vector<SaeLoadSpec>& spec_saes, const ModelLoads& kept);

// Loads kept's functions (each from its archive in store) and the SAEs the model
// does not hold yet into model; each that fails is logged to stderr, naming it, and skipped.
void restore_loads(LoadedModel& model, const ModelLoads& kept, const PersistedLoads& store);

}  // namespace gpubox::modeld
