// ModelClient: typed wrappers over rpc::Client for the model host's methods
// (rpc/PROTOCOL.md, "Models"): tensors come back as {dtype, shape, bytes},
// the bytes held in the received ZeroMQ frame (no copy). Belongs to the
// thread that owns the rpc::Client it wraps.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "rpc/client.h"
#include "base/status.h"

namespace gpubox::host {

// One tensor of a model.forward answer; `data` owns the little-endian bytes.
struct Tensor {
  std::string name;
  std::string dtype;  // float32 | bfloat16 | float16 | int64
  std::vector<std::int64_t> shape;
  zmq::message_t data;

  const void* bytes() const { return data.data(); }
  std::size_t size() const { return data.size(); }
  // Element i as a double (float32/bfloat16/float16/int64); REQUIRES i < elements().
  double at(std::size_t i) const;
  std::size_t elements() const;
};

struct ForwardResult {
  std::vector<Tensor> tensors;  // "logits" first
  nlohmann::json result;        // {tensors, lengths, padding}
};

// One streamed step of model.generate: a token per row (-1: the row finished), text deltas when the model has a tokenizer.
struct GenerateStep {
  std::int64_t step = 0;
  std::vector<std::int64_t> tokens;
  std::vector<std::string> text;
};

class ModelClient {
 public:
  explicit ModelClient(rpc::Client& client) : client_(client) {}
  ModelClient(const ModelClient&) = delete;
  ModelClient& operator=(const ModelClient&) = delete;

  // model.list's "models".
  Result<nlohmann::json> list();
  // One model's entry of model.list; not_found when no model has that name.
  Result<nlohmann::json> state(const std::string& model);
  // True while sys.info says the model host is starting or restarting.
  bool host_starting();
  // Polls model.list every 100 ms until the model is ready, also while the model host (re)starts
  // (on_progress gets each loading entry);
  // a model that failed to load is an error with modeld's reason.
  Result<nlohmann::json> wait_ready(const std::string& model, const std::function<void(const nlohmann::json&)>& on_progress);
  Result<nlohmann::json> info(const std::string& model);
  // model.stats: {"attention", "batching"} (rpc/PROTOCOL.md).
  Result<nlohmann::json> stats(const std::string& model);
  // model.hooks: [{"name", "shape"}] in forward order.
  Result<nlohmann::json> hooks(const std::string& model);
  Result<nlohmann::json> tokenize(const std::string& model, const std::string& text, std::optional<bool> add_special = {});
  Result<std::string> detokenize(const std::string& model, const std::vector<std::int64_t>& ids, bool skip_special = false);
  // model.forward with params {ids|text, last_only, ...} (everything but "model").
  Result<ForwardResult> forward(const std::string& model, nlohmann::json params);
  // model.run with params {ids|text, ops, ...}: tensors are the logits, then each capture in op order.
  // tensors: the ops' tensors (op fields {"dtype", "shape", "attachment": i} name the i-th), sent as raw frames.
  Result<ForwardResult> run(const std::string& model, nlohmann::json params, std::vector<zmq::message_t> tensors = {});
  // model.generate with params {ids|text, max_new_tokens, ...}; with on_step the call streams and
  // each step is handed over as it arrives (return false to cancel). The RESULT body.
  Result<nlohmann::json> generate(const std::string& model, nlohmann::json params,
                                  const std::function<bool(const GenerateStep&)>& on_step = nullptr);
  Result<nlohmann::json> load(nlohmann::json spec);
  Result<nlohmann::json> unload(const std::string& model);
  // model.sae_load {model, name, path, hook?}, model.sae_unload, model.saes (rpc/PROTOCOL.md).
  Result<nlohmann::json> sae_load(const std::string& model, nlohmann::json spec);
  Result<nlohmann::json> sae_unload(const std::string& model, const std::string& sae);
  Result<nlohmann::json> saes(const std::string& model);
  Result<nlohmann::json> gpu_info();

 private:
  Result<ForwardResult> tensors_of(const std::string& method, const std::string& model, nlohmann::json params,
                                   std::vector<zmq::message_t> attachments);
  rpc::Client& client_;
};

}  // namespace gpubox::host
