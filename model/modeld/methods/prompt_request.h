// What modeld's methods share to read a request: the model it names, and its
// prompts (token ids, text, or a conversation through the chat template),
// and the tokenizer's encode and decode. Any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "model/modeld/registry/model_registry.h"
#include "rpc/params.h"

namespace gpubox::modeld {

using Model = std::shared_ptr<const LoadedModel>;

// The ready model that params.model names.
Result<Model> find_model(ModelRegistry& registry, rpc::ParamReader& params);
// invalid_request, naming the model, when it has no tokenizer.json.
Status need_tokenizer(const LoadedModel& model);
// REQUIRES: model.tokenizer.
std::vector<std::int64_t> encode(const LoadedModel& model, const std::string& text, bool special);
// REQUIRES: model.tokenizer.
std::string decode(const LoadedModel& model, const std::vector<std::int64_t>& ids, bool skip_special);

// The model and prompts of a forward or generate request.
struct PromptRequest {
  Model model;
  std::vector<std::vector<std::int64_t>> prompts;
  bool batched = false;  // the prompt was a list of prompts: answer with lists
};

// params.model and its prompts ("ids", "text" or "messages"), each refused naming the field.
Result<PromptRequest> read_prompt_request(ModelRegistry& registry, rpc::ParamReader& params);

// The length of the longest of the prompts.
std::int64_t longest_prompt(const std::vector<std::vector<std::int64_t>>& prompts);

}  // namespace gpubox::modeld
