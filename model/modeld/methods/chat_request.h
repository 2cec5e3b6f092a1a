// ChatRequest: the conversation fields of model.chat_template, model.generate
// and model.forward (messages, tools, add_generation_prompt, template_kwargs,
// template_name), read from params and rendered with a model's chat template.
// No LibTorch; called on the handler's thread.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "model/chat/chat_template.h"
#include "rpc/params.h"
#include "base/status.h"

namespace gpubox::modeld {

struct ChatRequest {
  std::vector<nlohmann::ordered_json> conversations;  // one, or a batch
  bool batched = false;  // messages was a list of conversations
  nlohmann::ordered_json tools;   // null when not given
  nlohmann::ordered_json kwargs = nlohmann::ordered_json::object();
  bool add_generation_prompt = false;
  std::string template_name;  // empty: transformers' choice
};

// Reads the fields when params has "messages"; std::nullopt when it has none.
// messages, tools and template_kwargs may also be JSON text (a string), which
// keeps the order of object keys that a msgpack map decoded here loses.
Result<std::optional<ChatRequest>> read_chat_request(rpc::ParamReader& params, bool default_generation_prompt);

// One text per conversation; invalid_request when the model has no template.
Result<std::vector<std::string>> render_chat(const chat::ChatTemplates* templates, const ChatRequest& request,
                                             const std::string& model_name);

}  // namespace gpubox::modeld
