// model.weights {model, names, dtype?}: named parameters in TransformerLens'
// names and shapes (transformer_lens_weights.h), one DATA message per
// tensor, its bytes one attachment (no copy beyond the cast).
#include <ATen/ATen.h>
#include <fmt/format.h>

#include "model/modeld/scheduler/method_guard.h"
#include "model/modeld/methods/methods.h"
#include "model/modeld/decoder/tensor_wire.h"
#include "model/modeld/decoder/transformer_lens_weights.h"
#include "rpc/params.h"

namespace gpubox::modeld {

void add_weight_methods(rpc::MethodRegistry& methods, ModelRegistry& registry) {
  using nlohmann::json;
  methods.add("model.weights", [&registry](rpc::CallContext& ctx) {
    return guarded("model.weights", [&]() -> Result<json> {
      rpc::ParamReader params(ctx.params());
      auto model_name = params.string("model", true);
      auto names = params.string_list("names");
      auto dtype_name = params.string("dtype");
      if (Status s = params.finish(); !s) return s;
      auto model = registry.ready(*model_name);
      if (!model) return model.status();
      const LoadedModel& m = **model;
      if (!names) {  // no names: the list of what can be asked for
        return json{{"names", transformer_lens_weight_names(m.architecture)}};
      }
      if (names->empty()) return Status(ErrorCode::invalid_request, "params.names: expected a non-empty list of weight names");
      c10::ScalarType dtype = at::kFloat;
      if (dtype_name) {
        auto parsed = model_dtype_from_name(*dtype_name);
        if (!parsed) return Status(ErrorCode::invalid_request, "params.dtype: " + parsed.status().message());
        dtype = *parsed;
      }
      // Every name is checked before the first tensor goes out: a bad one sends nothing.
      std::vector<at::Tensor> tensors;
      for (const auto& name : *names) {
        auto tensor = transformer_lens_weight(m.architecture, *m.checkpoint, name);
        if (!tensor) return tensor.status();
        tensors.push_back(std::move(*tensor));
      }
      for (std::size_t i = 0; i < tensors.size(); ++i) {
        std::vector<zmq::message_t> attachments;
        json item = tensor_to_wire(tensors[i].to(dtype), attachments);
        item["name"] = (*names)[i];
        if (Status sent = ctx.send_data(item, std::move(attachments)); !sent) return sent;
      }
      return json{{"tensors", *names}};
    });
  });
}

}  // namespace gpubox::modeld
