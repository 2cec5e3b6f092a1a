#include "model/modeld/methods/prompt_request.h"

#include <fmt/format.h>

#include <algorithm>

#include <nlohmann/json.hpp>

#include "model/modeld/methods/chat_request.h"

namespace gpubox::modeld {
namespace {

using nlohmann::json;

// Prompts from "ids" (a list, or a list of lists), "text" (a string or a list
// of strings) or "messages" (a conversation, or a list of them, rendered with
// the chat template and encoded without adding special tokens again).
Result<std::vector<std::vector<std::int64_t>>> read_prompts(const LoadedModel& model, rpc::ParamReader& params,
                                                            bool& batched) {
  const json* ids = params.raw("ids");
  const json* text = params.raw("text");
  auto special = params.boolean("add_special_tokens");
  auto chat = read_chat_request(params, true);
  if (!chat) return chat.status();
  if (!params.ok()) return params.status();
  if ((ids != nullptr) + (text != nullptr) + chat->has_value() != 1) return Status(ErrorCode::invalid_request, "params: give exactly one of ids, text or messages");
  if (chat->has_value()) {
    if (special) return Status(ErrorCode::invalid_request, "params.add_special_tokens: does not apply to messages (the chat template adds them)");
    if (Status s = need_tokenizer(model); !s) return s;
    auto texts = render_chat(model.chat.get(), **chat, model.spec.name);
    if (!texts) return texts.status();
    batched = (*chat)->batched;
    std::vector<std::vector<std::int64_t>> prompts;
    for (const auto& t : *texts) prompts.push_back(encode(model, t, false));
    return prompts;
  }
  std::vector<std::vector<std::int64_t>> prompts;
  if (ids) {
    batched = ids->is_array() && !ids->empty() && ids->front().is_array();
    json rows = batched ? *ids : json::array({*ids});
    for (std::size_t r = 0; r < rows.size(); ++r) {
      if (!rows[r].is_array()) return Status(ErrorCode::invalid_request, fmt::format("params.ids[{}]: expected a list of token ids", r));
      std::vector<std::int64_t> row;
      for (std::size_t i = 0; i < rows[r].size(); ++i) {
        const json& id = rows[r][i];
        if (!id.is_number_integer()) {
          std::string field = batched ? fmt::format("params.ids[{}][{}]", r, i) : fmt::format("params.ids[{}]", i);
          return Status(ErrorCode::invalid_request, fmt::format("{}: {} is not a token id (token ids are integers)", field,
                                                                id.dump(-1, ' ', false, json::error_handler_t::replace)));
        }
        row.push_back(id.get<std::int64_t>());
      }
      prompts.push_back(std::move(row));
    }
    return prompts;
  }
  if (Status s = need_tokenizer(model); !s) return s;
  batched = text->is_array();
  json rows = batched ? *text : json::array({*text});
  for (std::size_t r = 0; r < rows.size(); ++r) {
    if (!rows[r].is_string()) return Status(ErrorCode::invalid_request, fmt::format("params.text[{}]: expected a string", r));
    prompts.push_back(encode(model, rows[r].get<std::string>(), special.value_or(true)));
  }
  return prompts;
}

}  // namespace

Result<Model> find_model(ModelRegistry& registry, rpc::ParamReader& params) {
  auto name = params.string("model", true);
  if (!params.ok()) return params.status();
  return registry.ready(*name);
}

Status need_tokenizer(const LoadedModel& model) {
  if (model.tokenizer) return Status::ok();
  return {ErrorCode::invalid_request,
          fmt::format("model \"{}\" has no tokenizer.json: send token ids instead of text", model.spec.name)};
}

std::vector<std::int64_t> encode(const LoadedModel& model, const std::string& text, bool special) {
  auto encoding = model.tokenizer->encode(text, special);
  return {encoding.ids.begin(), encoding.ids.end()};
}

std::string decode(const LoadedModel& model, const std::vector<std::int64_t>& ids, bool skip_special) {
  std::vector<std::int32_t> narrow(ids.begin(), ids.end());
  return model.tokenizer->decode(narrow, skip_special);
}

Result<PromptRequest> read_prompt_request(ModelRegistry& registry, rpc::ParamReader& params) {
  PromptRequest request;
  auto model = find_model(registry, params);
  if (!model) return model.status();
  request.model = std::move(*model);
  auto prompts = read_prompts(*request.model, params, request.batched);
  if (!prompts) return prompts.status();
  request.prompts = std::move(prompts.value());
  return request;
}

std::int64_t longest_prompt(const std::vector<std::vector<std::int64_t>>& prompts) {
  std::int64_t length = 0;
  for (const auto& p : prompts) length = std::max(length, static_cast<std::int64_t>(p.size()));
  return length;
}

}  // namespace gpubox::modeld
