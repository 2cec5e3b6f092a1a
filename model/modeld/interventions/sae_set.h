// SaeSet: the SAEs loaded for one model, by name (model.sae_load,
// model.sae_unload, and a model entry's "saes"). Any thread: a request takes
// a snapshot at its start and holds its SAEs until it ends, so an unload
// never pulls an SAE from under a running request and a load never changes one.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/thread_annotations.h"
#include "model/modeld/decoder/architecture.h"
#include "model/modeld/config/host_config.h"
#include "model/modeld/interventions/intervention_hooks.h"
#include "model/modeld/interventions/load_cap.h"
#include "model/modeld/interventions/sae.h"

namespace gpubox::modeld {

struct LoadedSae {
  SaeLoadSpec spec;  // hook filled in (cfg.json's when the spec had none)
  std::shared_ptr<const Sae> sae;
};

class SaeSet {
 public:
  explicit SaeSet(LoadCap cap = sae_cap()) : cap_(std::move(cap)) {}
  // resource_exhausted (LoadCap) when one more SAE of bytes would pass the cap:
  // a check before loading one (bytes 0: its count alone); add checks again.
  Status admits(std::size_t bytes) const;
  // already_exists when the name is taken; resource_exhausted past the cap.
  Status add(LoadedSae sae);
  // not_found naming the loaded ones.
  Status remove(const std::string& name);
  RequestSaes snapshot() const;
  // The loaded SAEs' specs (hooks filled in), in the order they were loaded.
  std::vector<SaeLoadSpec> specs() const;
  // [{name, hook, architecture, d_in, d_sae, k?, normalize_activations, apply_b_dec_to_input, bytes, path?}]
  nlohmann::json list(bool hide_paths) const;

 private:
  Status admits_locked(std::size_t bytes) const REQUIRES(mutex_);

  const LoadCap cap_;
  mutable Mutex mutex_;
  std::vector<LoadedSae> saes_ GUARDED_BY(mutex_);
};

// Reads the SAE at spec.path for a model of architecture on device, and checks
// it fits: its hook (spec.hook, else cfg.json's hook_name) is a hook point of
// the model, and the SAE's d_in is that point's width (an error names both widths).
Result<LoadedSae> load_sae(const SaeLoadSpec& spec, const Architecture& architecture, c10::Device device,
                           const std::string& where);

}  // namespace gpubox::modeld
