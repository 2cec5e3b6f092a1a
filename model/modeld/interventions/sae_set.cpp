#include "model/modeld/interventions/sae_set.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "model/modeld/decoder/hook_points.h"

namespace gpubox::modeld {

Status SaeSet::add(LoadedSae sae) {
  MutexLock lock(mutex_);
  for (const auto& held : saes_) {
    if (held.spec.name == sae.spec.name) {
      return {ErrorCode::already_exists, fmt::format("params.name: an SAE \"{}\" is already loaded; model.sae_unload it first",
                                                     sae.spec.name)};
    }
  }
  if (Status s = admits_locked(sae.sae->bytes()); !s) return s;
  saes_.push_back(std::move(sae));
  return {};
}

Status SaeSet::admits(std::size_t bytes) const {
  MutexLock lock(mutex_);
  return admits_locked(bytes);
}

Status SaeSet::admits_locked(std::size_t bytes) const {
  std::size_t held = 0;
  for (const auto& loaded : saes_) held += loaded.sae->bytes();
  return cap_.admits(saes_.size(), held, bytes);
}

Status SaeSet::remove(const std::string& name) {
  MutexLock lock(mutex_);
  std::vector<std::string> names;
  for (auto it = saes_.begin(); it != saes_.end(); ++it) {
    if (it->spec.name == name) {
      saes_.erase(it);
      return {};
    }
    names.push_back(it->spec.name);
  }
  return {ErrorCode::not_found, fmt::format("params.sae: no SAE \"{}\" (loaded: {})", name,
                                            names.empty() ? std::string("none") : fmt::format("{}", fmt::join(names, ", ")))};
}

RequestSaes SaeSet::snapshot() const {
  MutexLock lock(mutex_);
  RequestSaes out;
  for (const auto& held : saes_) {
    out.shapes.push_back({held.spec.name, held.spec.hook, held.sae->config().d_in, held.sae->config().d_sae});
    out.saes.push_back(held.sae);
  }
  return out;
}

std::vector<SaeLoadSpec> SaeSet::specs() const {
  MutexLock lock(mutex_);
  std::vector<SaeLoadSpec> out;
  for (const auto& held : saes_) out.push_back(held.spec);
  return out;
}

nlohmann::json SaeSet::list(bool hide_paths) const {
  MutexLock lock(mutex_);
  nlohmann::json out = nlohmann::json::array();
  for (const auto& held : saes_) {
    const hooks::SaeConfig& c = held.sae->config();
    nlohmann::json entry = {{"name", held.spec.name},
                            {"hook", held.spec.hook},
                            {"architecture", hooks::sae_architecture_name(c.architecture)},
                            {"d_in", c.d_in},
                            {"d_sae", c.d_sae},
                            {"apply_b_dec_to_input", c.apply_b_dec_to_input},
                            {"normalize_activations", hooks::sae_normalization_name(c.normalization)},
                            {"bytes", held.sae->bytes()}};
    if (c.architecture == hooks::SaeArchitecture::topk) entry["k"] = c.k;
    if (!hide_paths) entry["path"] = held.spec.path;
    out.push_back(std::move(entry));
  }
  return out;
}

Result<LoadedSae> load_sae(const SaeLoadSpec& spec, const Architecture& architecture, c10::Device device,
                           const std::string& where) {
  auto sae = Sae::load(spec.path, device);
  if (!sae) return Status(sae.status().code(), where + ": " + sae.status().message());
  LoadedSae loaded{spec, std::shared_ptr<const Sae>(std::move(*sae))};
  const hooks::SaeConfig& config = loaded.sae->config();
  if (loaded.spec.hook.empty()) loaded.spec.hook = config.hook_name;
  if (loaded.spec.hook.empty()) {
    return Status(ErrorCode::invalid_request, where + ".hook: required (cfg.json names no hook_name)");
  }
  auto points = hook_points(architecture);
  auto shapes = request_shapes(points, 1, 1, 1);
  for (const auto& shape : shapes) {
    if (shape.name != loaded.spec.hook) continue;
    if (shape.dims.back() != config.d_in) {
      return Status(ErrorCode::invalid_request,
                    fmt::format("{}.hook: the SAE's d_in is {}, {} of this model is {} wide", where, config.d_in,
                                loaded.spec.hook, shape.dims.back()));
    }
    return loaded;
  }
  return Status(ErrorCode::invalid_request,
                fmt::format("{}.hook: this model has no hook point \"{}\" (model.hooks lists them)", where, loaded.spec.hook));
}

}  // namespace gpubox::modeld
