// list_models, model_hooks, tokenize, generate, run_model, sae_top_features: the sandbox's model host (rpc/PROTOCOL.md
// "Models"). run_model's and generate's tensors (logits and captures) come back as their
// dtype and shape with the values when small, else a summary and the first
// values: an agent reads numbers, not megabytes; save_to writes them whole to a file.
#include <cmath>
#include <cstring>
#include <limits>

#include "host/mcp/model_ops.h"
#include "host/mcp/tensor_file.h"
#include "host/mcp/tools.h"
#include "host/model_client.h"

namespace gpubox::mcp {
namespace {

constexpr std::size_t kInlineValues = 256;  // an agent reads a few numbers, not pages of them
constexpr std::size_t kPreviewValues = 16;
constexpr std::size_t kInlineTotal = 4096;  // values written out across one result's tensors
constexpr std::size_t kListedTensors = 64;  // tensors described in one result (a capture at every step adds up)

ToolResult as_tool(Result<json> result) {
  if (!result) return ToolResult::from(result.status());
  ToolResult tool;
  tool.structured = std::move(*result);
  return tool;
}

// As the CLI does: waits while the model loads or the model host (re)starts;
// a model that failed to load is an error with modeld's reason.
Status wait_for_model(ToolEnv& env, const json& args) {
  auto record = env.sandboxes.resolve(args);
  if (!record) return record.status();
  auto lease = env.sandboxes.connect(*record);
  if (!lease) return lease.status();
  host::ModelClient models(**lease);
  auto ready = models.wait_ready(args["model"].get<std::string>(), {});
  return ready ? Status::ok() : ready.status();
}

ToolResult list_models(ToolEnv& env, const json& args) { return as_tool(call_sandbox(env, args, "model.list", json::object())); }

ToolResult model_hooks(ToolEnv& env, const json& args) {
  auto listed = call_sandbox(env, args, "model.hooks", {{"model", args["model"]}});
  if (!listed) return ToolResult::from(listed.status());
  (*listed)["count"] = (*listed)["hooks"].size();
  return as_tool(std::move(listed));
}

ToolResult tokenize(ToolEnv& env, const json& args) {
  if (Status ready = wait_for_model(env, args); !ready) return ToolResult::from(ready);
  json params = {{"model", args["model"]}, {"text", args["text"]}};
  if (args.contains("add_special_tokens")) params["add_special_tokens"] = args["add_special_tokens"];
  return as_tool(call_sandbox(env, args, "model.tokenize", params));
}

// A float32 tensor's values (or a summary of them) from its raw little-endian bytes; inline: may it list them all?
json tensor_values(const std::string& dtype, const std::string& bytes, bool inline_ok) {
  if (dtype != "float32") return json();
  std::size_t count = bytes.size() / sizeof(float);
  std::vector<float> values(count);
  if (count) std::memcpy(values.data(), bytes.data(), count * sizeof(float));
  if (count <= kInlineValues && inline_ok) return {{"values", values}};
  double sum = 0, squares = 0;
  float low = std::numeric_limits<float>::infinity(), high = -low;
  for (float v : values) {
    sum += static_cast<double>(v);
    squares += static_cast<double>(v) * static_cast<double>(v);
    low = std::min(low, v);
    high = std::max(high, v);
  }
  return {{"first_values", std::vector<float>(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(std::min(count, kPreviewValues)))},
          {"mean", count ? sum / static_cast<double>(count) : 0.0},
          {"min", low},
          {"max", high},
          {"norm", std::sqrt(squares)}};
}

// What a model.run or model.generate with ops sent: its tensors (logits and captures, a
// generate's named HOOK@STEP) in order, and its RESULT.
struct Ran {
  std::vector<NamedTensor> tensors;
  json result;
};

Result<Ran> run_with_ops(ToolEnv& env, const json& args, const std::string& method, const json& params, WireOps& wire) {
  auto record = env.sandboxes.resolve(args);
  if (!record) return record.status();
  auto lease = env.sandboxes.connect(*record);
  if (!lease) return lease.status();
  std::vector<zmq::message_t> attachments;
  for (const auto& bytes : wire.attachments) attachments.emplace_back(bytes.data(), bytes.size());
  rpc::CallOptions options;
  options.wait = std::chrono::minutes(10);
  options.attachments = &attachments;
  auto in_words = [&](const Status& status) { return Status(status.code(), ops_in_tool_words(status.message(), wire.user_ops)); };
  auto stream = (*lease)->stream(method, params, options);
  if (!stream) return in_words(stream.status());
  Ran ran;
  while (true) {
    auto next = (*stream)->next();
    if (!next) {
      lease->discard();
      return in_words(next.status());
    }
    if (!next->has_value()) break;
    const json& body = (*next)->body;
    if (!body.contains("name")) continue;  // not a tensor
    NamedTensor tensor{body.value("name", ""), body.value("dtype", ""), body.value("shape", std::vector<std::int64_t>{}), ""};
    if (body.contains("step")) tensor.name += "@" + std::to_string(body.value("step", 0));
    std::size_t index = body.value("attachment", 0u);
    if (index < (*next)->attachments.size()) {
      const auto& frame = (*next)->attachments[index];
      tensor.bytes.assign(static_cast<const char*>(frame.data()), frame.size());
    }
    ran.tensors.push_back(std::move(tensor));
  }
  const auto& final_result = (*stream)->result();
  if (!final_result) return in_words(final_result.status());
  ran.result = final_result.value();
  return ran;
}

// The tensors as an agent reads them (within kInlineTotal values and kListedTensors entries), and save_to's file.
Status describe_tensors(const json& args, const std::vector<NamedTensor>& tensors, json& structured) {
  json listed = json::array();
  std::size_t inlined = 0;
  for (const auto& tensor : tensors) {
    if (listed.size() == kListedTensors) break;
    json entry = {{"name", tensor.name}, {"dtype", tensor.dtype}, {"shape", tensor.shape}, {"bytes", tensor.bytes.size()}};
    std::size_t count = tensor.bytes.size() / sizeof(float);
    json values = tensor_values(tensor.dtype, tensor.bytes, inlined + count <= kInlineTotal);
    if (values.contains("values")) inlined += count;
    if (values.is_object()) entry.update(values);
    listed.push_back(std::move(entry));
  }
  structured["tensors"] = std::move(listed);
  if (tensors.size() > kListedTensors) {
    structured["tensors_not_listed"] = tensors.size() - kListedTensors;
  }
  if (args.contains("save_to")) {
    if (Status saved = write_safetensors(args["save_to"].get<std::string>(), tensors); !saved) return saved;
    structured["saved_to"] = args["save_to"];
  } else if (tensors.size() > kListedTensors) {
    structured["note"] = "only the first " + std::to_string(kListedTensors) + " tensors are listed; save_to writes them all to a file";
  }
  return Status::ok();
}

// The tool's ops and captures as wire ops; save_to checked before anything runs.
Result<WireOps> wire_ops(const json& args) {
  if (args.contains("save_to")) {
    if (Status fresh = check_new_file(args["save_to"].get<std::string>()); !fresh) return fresh;
  }
  return encode_model_ops(args.value("ops", json()), args.value("captures", json()), args.value("positions", json()));
}

ToolResult generate(ToolEnv& env, const json& args) {
  if (args.contains("prompt") == args.contains("ids")) return ToolResult::error("generate: give exactly one of prompt and ids");
  auto wire = wire_ops(args);
  if (!wire) return ToolResult::from(wire.status());
  if (Status ready = wait_for_model(env, args); !ready) return ToolResult::from(ready);
  json params = {{"model", args["model"]}};
  if (args.contains("prompt")) params["text"] = args["prompt"];
  if (args.contains("ids")) params["ids"] = args["ids"];
  for (const char* key : {"max_new_tokens", "temperature", "top_k", "top_p", "seed", "stop", "ignore_eos"}) {
    if (args.contains(key)) params[key] = args[key];
  }
  if (wire->ops.empty()) return as_tool(call_sandbox(env, args, "model.generate", params, std::chrono::minutes(10)));
  params["ops"] = wire->ops;
  auto ran = run_with_ops(env, args, "model.generate", params, *wire);
  if (!ran) return ToolResult::from(ran.status());
  ToolResult result;
  result.structured = ran->result;
  if (Status described = describe_tensors(args, ran->tensors, result.structured); !described) return ToolResult::from(described);
  return result;
}

ToolResult run_model(ToolEnv& env, const json& args) {
  auto wire = wire_ops(args);
  if (!wire) return ToolResult::from(wire.status());
  if (Status ready = wait_for_model(env, args); !ready) return ToolResult::from(ready);
  json params = {{"model", args["model"]}, {"text", args["text"]}, {"ops", wire->ops}};
  auto ran = run_with_ops(env, args, "model.run", params, *wire);
  if (!ran) return ToolResult::from(ran.status());
  ToolResult result;
  result.structured = {{"lengths", ran->result.value("lengths", json::array())}, {"padding", ran->result.value("padding", "left")}};
  if (Status described = describe_tensors(args, ran->tensors, result.structured); !described) return ToolResult::from(described);
  return result;
}

// The top features of a loaded SAE at each position of a prompt: one model.run with an sae_capture
// (top_k), the int64 indices and float32 values read back into {position, features: [{feature, activation}]}.
ToolResult sae_top_features(ToolEnv& env, const json& args) {
  if (Status ready = wait_for_model(env, args); !ready) return ToolResult::from(ready);
  auto record = env.sandboxes.resolve(args);
  if (!record) return ToolResult::from(record.status());
  auto lease = env.sandboxes.connect(*record);
  if (!lease) return ToolResult::from(lease.status());
  json op = {{"op", "sae_capture"}, {"sae", args["sae"]}, {"top_k", args.value("top_k", 10)}};
  if (args.contains("positions")) op["positions"] = args["positions"];
  json params = {{"model", args["model"]}, {"text", args["text"]}, {"ops", json::array({op})}, {"last_only", true}};
  rpc::CallOptions options;
  options.wait = std::chrono::minutes(10);
  auto stream = (*lease)->stream("model.run", params, options);
  if (!stream) return ToolResult::from(stream.status());
  std::vector<std::int64_t> indices, shape;
  std::vector<float> values;
  while (true) {
    auto next = (*stream)->next();
    if (!next) {
      lease->discard();
      return ToolResult::from(next.status());
    }
    if (!next->has_value()) break;
    const json& body = (*next)->body;
    std::string name = body.value("name", "");
    std::size_t index = body.value("attachment", 0u);
    if (index >= (*next)->attachments.size()) continue;
    const zmq::message_t& frame = (*next)->attachments[index];
    if (name.size() > 8 && name.compare(name.size() - 8, 8, ":indices") == 0) {
      indices.resize(frame.size() / sizeof(std::int64_t));
      if (!indices.empty()) std::memcpy(indices.data(), frame.data(), indices.size() * sizeof(std::int64_t));
      shape = body.value("shape", std::vector<std::int64_t>{});
    } else if (name.size() > 7 && name.compare(name.size() - 7, 7, ":values") == 0) {
      values.resize(frame.size() / sizeof(float));
      if (!values.empty()) std::memcpy(values.data(), frame.data(), values.size() * sizeof(float));
    }
  }
  const auto& final_result = (*stream)->result();
  if (!final_result) return ToolResult::from(final_result.status());
  if (shape.size() != 3 || indices.size() != values.size()) return ToolResult::error("sae_top_features: the model host sent no top features");
  json positions = json::array();
  std::int64_t k = shape[2];
  for (std::int64_t p = 0; p < shape[1]; ++p) {  // row 0: one prompt
    json features = json::array();
    for (std::int64_t i = 0; i < k; ++i) {
      auto at = static_cast<std::size_t>(p * k + i);
      features.push_back({{"feature", indices[at]}, {"activation", values[at]}});
    }
    positions.push_back({{"position", args.contains("positions") ? args["positions"][static_cast<std::size_t>(p)] : json(p)},
                         {"features", features}});
  }
  ToolResult result;
  result.structured = {{"sae", args["sae"]}, {"positions", positions}};
  return result;
}

}  // namespace

void add_model_tools(ToolRegistry& tools, ToolEnv& env) {
  json model = {{"type", "string"}, {"description", "a model's name in the sandbox's model host"}};
  tools.add({"list_models",
             "List the models of the sandbox's model host: name, state (loading, ready, failed), load progress, and "
             "once ready the architecture, dtype, device and how many hook points it has (model_hooks lists them).",
             tool_schema(json::object())},
            [&env](const json& args, ToolCallContext&) { return list_models(env, args); });
  tools.add({"model_hooks",
             "List a model's hook points, the names run_model captures and interventions edit (TransformerLens names, "
             "e.g. blocks.0.hook_resid_post), in forward order, each with its shape (batch and pos symbolic).",
             tool_schema({{"model", model}}, {"model"})},
            [&env](const json& args, ToolCallContext&) { return model_hooks(env, args); });
  tools.add({"tokenize", "Tokenize text with a model's tokenizer: token ids and their byte offsets.",
             tool_schema({{"model", model}, {"text", {{"type", "string"}}}, {"add_special_tokens", {{"type", "boolean"}}}},
                         {"model", "text"})},
            [&env](const json& args, ToolCallContext&) { return tokenize(env, args); });
  // ops, captures, positions and save_to: the interventions and outputs run_model and generate share.
  json ops = {{"type", "array"},
              {"items", {{"type", "object"}}},
              {"description",
               "interventions, applied in order at their hook points (hooks/README.md; the same op dicts as Python's "
               "model.run(ops=...)): {\"op\": \"add\", \"hook\": \"blocks.0.hook_resid_post\", \"vector\": [...], \"scale\": 4}, "
               "set/mean/patch (value, or patch's from_row), scale (factor), zero, project_out (direction), capture, "
               "SAE ops (sae_capture, sae_steer, sae_ablate, sae_set, sae_splice with \"sae\") and fn (\"fn\": a function's "
               "name loaded with model.fn_load); any op may select rows, positions, heads (and in generate steps). "
               "Tensors as numbers or nested lists of numbers"}};
  json captures = {{"type", "array"}, {"items", {{"type", "string"}}}, {"description", "hook names to capture, after the ops"}};
  json positions = {{"type", "array"}, {"items", {{"type", "integer"}}}, {"description", "the positions the captures keep"}};
  json save_to = {{"type", "string"},
                  {"description", "an absolute path of a new file on this machine: every tensor written whole (safetensors; "
                                  "a generate's capture as HOOK@STEP)"}};
  tools.add({"generate",
             "Generate text from a prompt with a model of the sandbox's model host, optionally with interventions (ops, "
             "e.g. steering with add) at every forward pass and captures (each named HOOK@STEP).",
             tool_schema({{"model", model},
                          {"prompt", {{"type", "string"}, {"description", "the prompt as text"}}},
                          {"ids", {{"type", "array"}, {"items", {{"type", "integer"}}}, {"description", "or as token ids"}}},
                          {"max_new_tokens", {{"type", "integer"}, {"minimum", 1}}},
                          {"temperature", {{"type", "number"}, {"minimum", 0}}},
                          {"top_k", {{"type", "integer"}, {"minimum", 0}}},
                          {"top_p", {{"type", "number"}, {"minimum", 0}, {"maximum", 1}}},
                          {"seed", {{"type", "integer"}}},
                          {"stop", {{"type", "array"}, {"items", {{"type", "string"}}}}},
                          {"ignore_eos", {{"type", "boolean"}}},
                          {"ops", ops},
                          {"captures", captures},
                          {"positions", positions},
                          {"save_to", save_to}},
                         {"model"})},
            [&env](const json& args, ToolCallContext&) { return generate(env, args); });
  tools.add({"run_model",
             "Run a model's forward pass on text, with interventions (ops: steering, ablation, patching, SAE ops, named "
             "functions) and captures at named hook points (TransformerLens names, e.g. blocks.0.hook_resid_post); returns "
             "the logits and each capture (values when small, else a summary; save_to writes them whole).",
             tool_schema({{"model", model},
                          {"text", {{"type", "string"}}},
                          {"ops", ops},
                          {"captures", captures},
                          {"positions", positions},
                          {"save_to", save_to}},
                         {"model", "text"})},
            [&env](const json& args, ToolCallContext&) { return run_model(env, args); });
  tools.add({"sae_top_features",
             "The top features of a sparse autoencoder loaded in the model host (gpubox model ID sae load) at each "
             "position of a prompt: feature index and activation, largest first, computed where the model runs.",
             tool_schema({{"model", model},
                          {"sae", {{"type", "string"}, {"description", "the SAE's name (model.saes lists them)"}}},
                          {"text", {{"type", "string"}}},
                          {"top_k", {{"type", "integer"}, {"minimum", 1}, {"maximum", 1024}}},
                          {"positions", {{"type", "array"}, {"items", {{"type", "integer"}}}}}},
                         {"model", "sae", "text"})},
            [&env](const json& args, ToolCallContext&) { return sae_top_features(env, args); });
}

}  // namespace gpubox::mcp
