// model.fn_load, model.fn_unload, model.fns: the fn op's functions of a ready
// model, kept under a name (user_fn.h). Loading runs on the calling thread; a failure changes nothing.
#include <fmt/format.h>

#include "model/modeld/method_guard.h"
#include "model/modeld/methods.h"
#include "model/modeld/user_fn.h"
#include "rpc/params.h"

namespace gpubox::modeld {

void add_fn_methods(rpc::MethodRegistry& methods, ModelRegistry& registry) {
  using nlohmann::json;
  methods.add("model.fn_load", [&registry](rpc::CallContext& ctx) {
    return guarded("model.fn_load", [&]() -> Result<json> {
      rpc::ParamReader params(ctx.params());
      auto model_name = params.string("model", true);
      auto name = params.string("name", true);
      if (Status s = params.finish(); !s) return s;
      if (name->empty()) return Status::invalid_request("params.name: expected a non-empty name");
      if (ctx.attachments().size() != 1) {
        return Status::invalid_request(fmt::format("attachments: expected one, the function's TorchScript archive (torch.jit.save); got {}",
                                       ctx.attachments().size()));
      }
      auto model = registry.ready(*model_name);
      if (!model) return model.status();
      const zmq::message_t& frame = ctx.attachments()[0];
      auto fn = UserFn::load(std::string_view(static_cast<const char*>(frame.data()), frame.size()), (*model)->decoder->device(),
                             "attachments[0]");
      if (!fn) return fn.status();
      if (Status added = (*model)->fns->add(*name, *fn); !added) return added;
      return json{{"name", *name}, {"bytes", frame.size()}};
    });
  });
  methods.add("model.fn_unload", [&registry](rpc::CallContext& ctx) -> Result<json> {
    rpc::ParamReader params(ctx.params());
    auto model_name = params.string("model", true);
    auto name = params.string("name", true);
    if (Status s = params.finish(); !s) return s;
    auto model = registry.ready(*model_name);
    if (!model) return model.status();
    if (Status removed = (*model)->fns->remove(*name); !removed) return removed;
    return json{{"unloaded", *name}};
  });
  methods.add("model.fns", [&registry](rpc::CallContext& ctx) -> Result<json> {
    rpc::ParamReader params(ctx.params());
    auto model_name = params.string("model", true);
    if (Status s = params.finish(); !s) return s;
    auto model = registry.ready(*model_name);
    if (!model) return model.status();
    return json{{"fns", (*model)->fns->list()}};
  });
}

}  // namespace gpubox::modeld
