#include "model/modeld/registry/model_loads.h"

#include <fmt/format.h>

#include <cstdio>
#include <map>

#include "model/modeld/interventions/user_fn.h"

namespace gpubox::modeld {
namespace {

void log_dropped(const LoadedModel& model, const std::string& what, const Status& why) {
  std::fprintf(stderr, "gpubox-modeld: model \"%s\": %s is not loaded again after the restart and is dropped: %s\n",
               model.spec.name.c_str(), what.c_str(), why.message().c_str());
}

}  // namespace

ModelLoads loads_of(const LoadedModel& model) {
  ModelLoads loads;
  loads.fns = model.fns->records();
  loads.saes = model.saes->specs();
  return loads;
}

std::vector<SaeLoadSpec> spec_saes_kept(const std::vector<SaeLoadSpec>& spec_saes, const ModelLoads& kept) {
  std::vector<SaeLoadSpec> out;
  for (const auto& sae : spec_saes) {
    for (const auto& held : kept.saes) {
      if (held.name == sae.name && held.path == sae.path) {
        out.push_back(sae);
        break;
      }
    }
  }
  return out;
}

void restore_loads(LoadedModel& model, const ModelLoads& kept, const PersistedLoads& store) {
  std::map<std::string, Result<std::shared_ptr<const UserFn>>> loaded;  // by sha256: each archive once
  for (const auto& record : kept.fns) {
    std::string what = fmt::format("function \"{}\" (sha256:{})", record.name, record.sha256);
    auto found = loaded.find(record.sha256);
    if (found == loaded.end()) {
      Result<std::shared_ptr<const UserFn>> fn = Status(ErrorCode::internal, "not loaded");
      auto bytes = store.read_archive(record.sha256);
      if (!bytes) fn = bytes.status();
      else fn = UserFn::load(*bytes, model.decoder->device(), store.archive_path(record.sha256));
      found = loaded.emplace(record.sha256, std::move(fn)).first;
    }
    if (!found->second) {
      log_dropped(model, what, found->second.status());
      continue;
    }
    FnEntry entry{*found->second, record.sha256, (*found->second)->bytes()};
    auto added = model.fns->add(record.name, record.session, record.shared, std::move(entry));
    if (!added) log_dropped(model, what, added.status());
  }
  auto held = model.saes->specs();
  for (std::size_t i = 0; i < kept.saes.size(); ++i) {
    const SaeLoadSpec& spec = kept.saes[i];
    bool loaded_already = false;
    for (const auto& sae : held) loaded_already = loaded_already || sae.name == spec.name;
    if (loaded_already) continue;
    std::string what = fmt::format("SAE \"{}\"", spec.name);
    auto sae = load_sae(spec, model.architecture, model.decoder->device(), fmt::format("{}: models.{}.saes[{}]", store.file(),
                                                                                        model.spec.name, i));
    if (!sae) {
      log_dropped(model, what, sae.status());
      continue;
    }
    if (Status added = model.saes->add(std::move(*sae)); !added) log_dropped(model, what, added);
  }
}

}  // namespace gpubox::modeld
