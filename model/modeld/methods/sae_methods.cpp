// model.sae_load, model.sae_unload, model.saes: the SAEs of a ready model
// (sae_set.h). Loading runs on the calling thread; a failure changes nothing.
// What is loaded is kept for a restart (ModelRegistry::keep_loads).
#include <ATen/ATen.h>
#include <fmt/format.h>

#include "model/modeld/scheduler/method_guard.h"
#include "model/modeld/methods/methods.h"
#include "model/modeld/interventions/sae_set.h"
#include "rpc/params.h"

namespace gpubox::modeld {

void add_sae_methods(rpc::MethodRegistry& methods, ModelRegistry& registry) {
  using nlohmann::json;
  methods.add("model.sae_load", [&registry](rpc::CallContext& ctx) {
    return guarded("model.sae_load", [&]() -> Result<json> {
      rpc::ParamReader params(ctx.params());
      auto model_name = params.string("model", true);
      json entry = json::object();
      for (const char* key : {"name", "path", "hook"}) {
        if (const json* value = params.raw(key)) entry[key] = *value;
      }
      if (Status s = params.finish(); !s) return s;
      auto spec = parse_sae_load_spec(entry, "params");
      if (!spec) return spec.status();
      auto model = registry.ready(*model_name);
      if (!model) return model.status();
      if (Status s = (*model)->saes->admits(0); !s) return s;  // before reading the weights; add checks the bytes
      auto loaded = load_sae(*spec, (*model)->architecture, (*model)->decoder->device(), "params");
      if (!loaded) return loaded.status();
      const hooks::SaeConfig& config = loaded->sae->config();
      json result = {{"name", loaded->spec.name}, {"hook", loaded->spec.hook}, {"d_in", config.d_in}, {"d_sae", config.d_sae},
                     {"architecture", hooks::sae_architecture_name(config.architecture)}};
      if (Status added = (*model)->saes->add(std::move(*loaded)); !added) return added;
      registry.keep_loads(*model);
      return result;
    });
  });
  methods.add("model.sae_unload", [&registry](rpc::CallContext& ctx) -> Result<json> {
    rpc::ParamReader params(ctx.params());
    auto model_name = params.string("model", true);
    auto name = params.string("sae", true);
    if (Status s = params.finish(); !s) return s;
    auto model = registry.ready(*model_name);
    if (!model) return model.status();
    if (Status removed = (*model)->saes->remove(*name); !removed) return removed;
    registry.keep_loads(*model);
    return json{{"unloaded", *name}};
  });
  methods.add("model.saes", [&registry](rpc::CallContext& ctx) -> Result<json> {
    rpc::ParamReader params(ctx.params());
    auto model_name = params.string("model", true);
    if (Status s = params.finish(); !s) return s;
    auto model = registry.ready(*model_name);
    if (!model) return model.status();
    return json{{"saes", (*model)->saes->list((*model)->spec.hidden)}};
  });
}

}  // namespace gpubox::modeld
