// model.fn_load, model.fn_unload, model.fns: the fn op's functions of a ready
// model, kept under a name for a session, shared, or by content (fn_set.h).
// Loading runs on the calling thread; a failure changes nothing. What is
// loaded is kept for a restart (ModelRegistry::keep_loads).
#include <fmt/format.h>

#include "base/sha256.h"
#include "model/modeld/scheduler/method_guard.h"
#include "model/modeld/methods/methods.h"
#include "model/modeld/interventions/user_fn.h"
#include "rpc/params.h"

namespace gpubox::modeld {

void add_fn_methods(rpc::MethodRegistry& methods, ModelRegistry& registry) {
  using nlohmann::json;
  methods.add("model.fn_load", [&registry](rpc::CallContext& ctx) {
    return guarded("model.fn_load", [&]() -> Result<json> {
      rpc::ParamReader params(ctx.params());
      auto model_name = params.string("model", true);
      auto name = params.string("name", true);
      std::string session = params.string("session").value_or("");
      bool shared = params.boolean("shared").value_or(false);
      if (Status s = params.finish(); !s) return s;
      if (Status s = check_session(session); !s) return s;
      if (shared && session.empty()) {
        return Status::invalid_request("params.shared: a shared function needs the session that may unload it: send session too");
      }
      if (ctx.attachments().size() != 1) {
        return Status::invalid_request(fmt::format("attachments: expected one, the function's TorchScript archive (torch.jit.save); got {}",
                                       ctx.attachments().size()));
      }
      auto model = registry.ready(*model_name);
      if (!model) return model.status();
      const zmq::message_t& frame = ctx.attachments()[0];
      Sha256 hash;
      hash.update(frame.data(), frame.size());
      FnEntry entry{nullptr, hash.hex_digest(), frame.size()};
      // The cheap refusals before the archive is loaded onto the device; add() checks again.
      if (Status s = FnSet::check_load(*name, entry.sha256, session); !s) return s;
      if (Status s = (*model)->fns->admits(entry.bytes); !s) return s;
      auto fn = UserFn::load(std::string_view(static_cast<const char*>(frame.data()), frame.size()), (*model)->decoder->device(),
                             "attachments[0]");
      if (!fn) return fn.status();
      entry.fn = *fn;
      std::string sha256 = entry.sha256;
      auto added = (*model)->fns->add(*name, session, shared, std::move(entry));
      if (added) registry.keep_loads(*model, sha256, std::string_view(static_cast<const char*>(frame.data()), frame.size()));
      return added;
    });
  });
  methods.add("model.fn_unload", [&registry](rpc::CallContext& ctx) -> Result<json> {
    rpc::ParamReader params(ctx.params());
    auto model_name = params.string("model", true);
    auto name = params.string("name", true);
    std::string session = params.string("session").value_or("");
    if (Status s = params.finish(); !s) return s;
    if (Status s = check_session(session); !s) return s;
    auto model = registry.ready(*model_name);
    if (!model) return model.status();
    if (Status removed = (*model)->fns->remove(*name, session); !removed) return removed;
    registry.keep_loads(*model);
    return json{{"unloaded", *name}};
  });
  methods.add("model.fns", [&registry](rpc::CallContext& ctx) -> Result<json> {
    rpc::ParamReader params(ctx.params());
    auto model_name = params.string("model", true);
    std::string session = params.string("session").value_or("");
    if (Status s = params.finish(); !s) return s;
    if (Status s = check_session(session); !s) return s;
    auto model = registry.ready(*model_name);
    if (!model) return model.status();
    return json{{"fns", (*model)->fns->list(session)}};
  });
}

}  // namespace gpubox::modeld
