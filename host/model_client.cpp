#include "host/model_client.h"

#include <chrono>
#include <cmath>
#include <cstring>
#include <thread>

namespace gpubox::host {
namespace {

using nlohmann::json;

float half_to_float(std::uint16_t h) {
  int exponent = (h >> 10) & 0x1f;
  int mantissa = h & 0x3ff;
  float sign = (h & 0x8000) ? -1.0f : 1.0f;
  if (exponent == 0) return sign * std::ldexp(static_cast<float>(mantissa), -24);
  if (exponent == 31) return mantissa ? NAN : sign * INFINITY;
  return sign * std::ldexp(static_cast<float>(mantissa | 0x400), exponent - 25);
}

std::size_t element_size(const std::string& dtype) {
  if (dtype == "float32") return 4;
  if (dtype == "int64") return 8;
  if (dtype == "bfloat16" || dtype == "float16") return 2;
  return 0;
}

// A DATA item of model.forward into a Tensor, its sizes checked against the attachment.
Result<Tensor> tensor_from(rpc::Incoming&& item) {
  const json& body = item.body;
  Tensor tensor;
  tensor.name = body.value("name", "");
  tensor.dtype = body.value("dtype", "");
  std::size_t count = 1;
  if (body.contains("shape") && body["shape"].is_array()) {
    for (const auto& d : body["shape"]) {
      if (!d.is_number_integer() || d.get<std::int64_t>() < 0) return Status(ErrorCode::internal, "model.forward: a bad shape " + body.dump());
      tensor.shape.push_back(d.get<std::int64_t>());
      count *= static_cast<std::size_t>(tensor.shape.back());
    }
  }
  std::size_t index = body.value("attachment", 0);
  if (index >= item.attachments.size() || element_size(tensor.dtype) == 0 ||
      item.attachments[index].size() != count * element_size(tensor.dtype)) {
    return Status(ErrorCode::internal, "model.forward: tensor '" + tensor.name + "' (" + tensor.dtype +
                                           ") does not match its attachment's size");
  }
  tensor.data = std::move(item.attachments[index]);
  return tensor;
}

}  // namespace

std::size_t Tensor::elements() const {
  std::size_t size = element_size(dtype);
  return size ? data.size() / size : 0;
}

double Tensor::at(std::size_t i) const {
  const auto* p = static_cast<const unsigned char*>(data.data());
  if (dtype == "float32") {
    float v;
    std::memcpy(&v, p + 4 * i, 4);
    return v;
  }
  if (dtype == "int64") {
    std::int64_t v;
    std::memcpy(&v, p + 8 * i, 8);
    return static_cast<double>(v);
  }
  std::uint16_t h;
  std::memcpy(&h, p + 2 * i, 2);
  if (dtype == "float16") return half_to_float(h);
  std::uint32_t bits = static_cast<std::uint32_t>(h) << 16;  // bfloat16: the top half of a float32
  float v;
  std::memcpy(&v, &bits, 4);
  return v;
}

Result<json> ModelClient::list() {
  auto listed = client_.call("model.list");
  if (!listed) return listed.status();
  return listed->value("models", json::array());
}

Result<json> ModelClient::state(const std::string& model) {
  auto models = list();
  if (!models) return models.status();
  std::string names;
  for (const auto& entry : *models) {
    if (entry.value("name", "") == model) return entry;
    names += (names.empty() ? "" : ", ") + entry.value("name", "");
  }
  return Status(ErrorCode::not_found, "no model named '" + model + "' (loaded: " + (names.empty() ? "none" : names) + ")");
}

Result<json> ModelClient::wait_ready(const std::string& model, const std::function<void(const json&)>& on_progress) {
  while (true) {
    auto entry = state(model);
    if (!entry && entry.status().code() == ErrorCode::unavailable && host_starting()) entry = json{{"state", "loading"}};
    if (!entry) return entry.status();
    std::string state = entry->value("state", "");
    if (state == "ready") return entry;
    if (state == "failed") {
      return Status(ErrorCode::unavailable, "model '" + model + "' failed to load: " + entry->value("error", "no reason given"));
    }
    if (on_progress) on_progress(*entry);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

bool ModelClient::host_starting() {
  auto info = client_.call("sys.info");
  if (!info) return false;
  std::string state = info->value("model_host", json::object()).value("state", "");
  return state == "starting" || state == "restarting";
}

Result<json> ModelClient::info(const std::string& model) { return client_.call("model.info", {{"model", model}}); }
Result<json> ModelClient::stats(const std::string& model) { return client_.call("model.stats", {{"model", model}}); }

Result<json> ModelClient::hooks(const std::string& model) {
  auto listed = client_.call("model.hooks", {{"model", model}});
  if (!listed) return listed.status();
  return (*listed)["hooks"];
}

Result<json> ModelClient::tokenize(const std::string& model, const std::string& text, std::optional<bool> add_special) {
  json params = {{"model", model}, {"text", text}};
  if (add_special) params["add_special_tokens"] = *add_special;
  return client_.call("model.tokenize", params);
}

Result<std::string> ModelClient::detokenize(const std::string& model, const std::vector<std::int64_t>& ids, bool skip_special) {
  auto result = client_.call("model.detokenize", {{"model", model}, {"ids", ids}, {"skip_special_tokens", skip_special}});
  if (!result) return result.status();
  return result->value("text", "");
}

Result<ForwardResult> ModelClient::forward(const std::string& model, json params) {
  return tensors_of("model.forward", model, std::move(params), {});
}

Result<ForwardResult> ModelClient::run(const std::string& model, json params, std::vector<zmq::message_t> tensors) {
  return tensors_of("model.run", model, std::move(params), std::move(tensors));
}

Result<ForwardResult> ModelClient::tensors_of(const std::string& method, const std::string& model, json params,
                                              std::vector<zmq::message_t> attachments) {
  params["model"] = model;
  rpc::CallOptions options;
  options.attachments = &attachments;
  auto stream = client_.stream(method, params, options);
  if (!stream) return stream.status();
  ForwardResult out;
  while (true) {
    auto item = (*stream)->next();
    if (!item) return item.status();
    if (!*item) break;
    auto tensor = tensor_from(std::move(**item));
    if (!tensor) return tensor.status();
    out.tensors.push_back(std::move(*tensor));
  }
  if (!(*stream)->result()) return (*stream)->result().status();
  out.result = (*stream)->result().value();
  return out;
}

Result<json> ModelClient::generate(const std::string& model, json params, const std::function<bool(const GenerateStep&)>& on_step) {
  params["model"] = model;
  if (!on_step) return client_.call("model.generate", params);
  params["stream"] = true;
  auto stream = client_.stream("model.generate", params);
  if (!stream) return stream.status();
  while (true) {
    auto item = (*stream)->next();
    if (!item) return item.status();
    if (!*item) break;
    const json& body = (**item).body;
    GenerateStep step;
    step.step = body.value("step", 0);
    if (body.contains("tokens")) step.tokens = body["tokens"].get<std::vector<std::int64_t>>();
    if (body.contains("text")) step.text = body["text"].get<std::vector<std::string>>();
    if (!on_step(step)) {
      (void)(*stream)->cancel();
      while (!(*stream)->ended()) {
        if (!(*stream)->next()) break;
      }
    }
  }
  return (*stream)->result();
}

Result<json> ModelClient::load(json spec) { return client_.call("model.load", spec); }
Result<json> ModelClient::unload(const std::string& model) { return client_.call("model.unload", {{"model", model}}); }
Result<json> ModelClient::gpu_info() { return client_.call("gpu.info"); }

Result<json> ModelClient::sae_load(const std::string& model, json spec) {
  spec["model"] = model;
  return client_.call("model.sae_load", spec);
}

Result<json> ModelClient::sae_unload(const std::string& model, const std::string& sae) {
  return client_.call("model.sae_unload", {{"model", model}, {"sae", sae}});
}

Result<json> ModelClient::saes(const std::string& model) { return client_.call("model.saes", {{"model", model}}); }

}  // namespace gpubox::host
