// Fuzzes model/chat with the input as a chat template, or as a template, a NUL
// byte and the render's variables as JSON (messages, tools, ...): parsing and
// rendering either succeed within the limits or fail with a message.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "model/chat/chat_template.h"

namespace {

void check(bool holds) {
  if (!holds) std::abort();
}

constexpr std::string_view kVariables = R"({"bos_token": "<s>", "eos_token": "</s>", "add_generation_prompt": true,
  "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi \u00e9 \ud83d\udc4b"},
               {"role": "assistant", "content": "<think>\nx\n</think>\n\nHello", "tool_calls": [{"function": {"name": "f", "arguments": {"a": 1}}}]},
               {"role": "tool", "content": "42"}, {"role": "user", "content": [{"type": "text", "text": "part"}, {"type": "image"}]}],
  "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}}}}]})";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > 64 * 1024) return -1;
  std::string_view input(reinterpret_cast<const char*>(data), size);  // NOLINT: bytes as chars
  std::string_view source = input, variables = kVariables;
  if (std::size_t nul = input.find('\0'); nul != std::string_view::npos) {
    source = input.substr(0, nul);
    variables = input.substr(nul + 1);
  }
  gpubox::chat::Limits limits;
  limits.max_output_bytes = 64 * 1024;
  limits.max_iterations = 20'000;
  limits.max_items = 200'000;
  auto parsed = gpubox::chat::ChatTemplate::parse(source, limits);
  if (!parsed) {
    check(!parsed.status().message().empty());
    return 0;
  }
  auto json = nlohmann::ordered_json::parse(variables, nullptr, false);
  if (json.is_discarded() || !json.is_object()) json = nlohmann::ordered_json::object();
  auto rendered = (*parsed)->render(json);
  if (rendered) check(rendered->size() <= limits.max_output_bytes);
  else check(!rendered.status().message().empty());
  return 0;
}
