#include "model/modeld/methods/chat_request.h"

#include <fmt/format.h>

namespace gpubox::modeld {
namespace {

using nlohmann::ordered_json;

// A params field as order-preserving JSON: JSON text is parsed, anything else converted.
Result<ordered_json> ordered(const nlohmann::json& value, const char* field) {
  std::string text = value.is_string() ? value.get<std::string>()
                                       : value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  ordered_json parsed = ordered_json::parse(text, nullptr, false);
  if (parsed.is_discarded()) return Status(ErrorCode::invalid_request, fmt::format("params.{}: not valid JSON text", field));
  return parsed;
}

}  // namespace

Result<std::optional<ChatRequest>> read_chat_request(rpc::ParamReader& params, bool default_generation_prompt) {
  const nlohmann::json* messages = params.raw("messages");
  if (!messages) return std::optional<ChatRequest>();
  const nlohmann::json* tools = params.raw("tools");
  const nlohmann::json* kwargs = params.raw("template_kwargs");
  auto agp = params.boolean("add_generation_prompt");
  auto name = params.string("template_name");
  if (!params.ok()) return params.status();
  ChatRequest request;
  request.add_generation_prompt = agp.value_or(default_generation_prompt);
  request.template_name = name.value_or("");
  auto conversation = ordered(*messages, "messages");
  if (!conversation) return conversation.status();
  if (!conversation->is_array()) return Status(ErrorCode::invalid_request, "params.messages: expected a list of {role, content} objects");
  request.batched = !conversation->empty() && conversation->front().is_array();
  if (request.batched) {
    for (std::size_t k = 0; k < conversation->size(); ++k) {
      if (!(*conversation)[k].is_array()) return Status(ErrorCode::invalid_request, fmt::format("params.messages[{}]: expected a list of messages", k));
      request.conversations.push_back((*conversation)[k]);
    }
  } else {
    request.conversations.push_back(std::move(*conversation));
  }
  if (tools && !tools->is_null()) {
    auto parsed = ordered(*tools, "tools");
    if (!parsed) return parsed.status();
    if (!parsed->is_array()) return Status(ErrorCode::invalid_request, "params.tools: expected a list of tool schemas");
    request.tools = std::move(*parsed);
  }
  if (kwargs) {
    auto parsed = ordered(*kwargs, "template_kwargs");
    if (!parsed) return parsed.status();
    if (!parsed->is_object()) return Status(ErrorCode::invalid_request, "params.template_kwargs: expected an object");
    request.kwargs = std::move(*parsed);
  }
  return std::optional<ChatRequest>(std::move(request));
}

Result<std::vector<std::string>> render_chat(const chat::ChatTemplates* templates, const ChatRequest& request,
                                             const std::string& model_name) {
  if (!templates || !templates->has_template()) {
    return Status(ErrorCode::invalid_request,
                  fmt::format("model \"{}\" has no chat template (tokenizer_config.json has no chat_template): send text or ids", model_name));
  }
  std::vector<std::string> texts;
  for (std::size_t k = 0; k < request.conversations.size(); ++k) {
    auto text = templates->apply(request.conversations[k], request.tools, request.add_generation_prompt, request.kwargs,
                                 request.template_name);
    if (!text) {
      if (!request.batched) return text.status();
      return Status(text.status().code(), fmt::format("params.messages[{}]: {}", k, text.status().message()));
    }
    texts.push_back(std::move(*text));
  }
  return texts;
}

}  // namespace gpubox::modeld
