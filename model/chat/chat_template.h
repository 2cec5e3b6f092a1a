// gpubox::chat: Hugging Face chat templates (tokenizer_config.json's Jinja
// "chat_template") rendered natively, byte for byte as transformers'
// apply_chat_template does, for the Jinja subset docs/chat_templates.md lists.
// Templates are outside bytes: every failure is a Status naming the line and
// column, and output size, loop iterations and nesting are bounded.
#pragma once

#include <nlohmann/json.hpp>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "base/status.h"

namespace gpubox::chat {

struct Limits {
  std::size_t max_template_bytes = 1 << 20;
  std::size_t max_output_bytes = 4 << 20;  // also the largest string a render may build
  std::size_t max_iterations = 1'000'000;  // loop iterations of one render
  std::size_t max_items = 4'000'000;       // list and dict elements one render may build
  int max_depth = 200;                     // nesting of statements and expressions in the source
  int max_call_depth = 16;                 // nested macro calls
  int max_eval_depth = 1000;               // the renderer's recursion, macros included
};

// One parsed template; immutable and safe to render from many threads at once.
class ChatTemplate {
 public:
  // invalid_request "chat_template: line L, column C: problem" on a syntax
  // error or an unsupported construct.
  static Result<std::shared_ptr<const ChatTemplate>> parse(std::string_view source, const Limits& limits = {});
  ~ChatTemplate();
  ChatTemplate(const ChatTemplate&) = delete;
  ChatTemplate& operator=(const ChatTemplate&) = delete;

  // Renders with `variables` (an object: each key a template variable).
  // invalid_request naming the line and column (a limit passed says which),
  // or "chat template raised: MSG" for raise_exception(MSG).
  Result<std::string> render(const nlohmann::ordered_json& variables) const;

 private:
  ChatTemplate();
  struct Parsed;
  std::unique_ptr<Parsed> parsed_;
  Limits limits_;
};

// A model's chat templates and the special tokens they see, from
// tokenizer_config.json (and chat_template.jinja, which transformers prefers).
class ChatTemplates {
 public:
  // tokenizer_config: the file's text; jinja: chat_template.jinja's text, if the directory has one.
  // Gives a ChatTemplates with has_template() false when neither carries a template.
  static Result<std::shared_ptr<const ChatTemplates>> from_config(std::string_view tokenizer_config,
                                                                  std::optional<std::string_view> jinja,
                                                                  const Limits& limits = {});
  // Reads DIR/tokenizer_config.json and DIR/chat_template.jinja; null when neither exists.
  static Result<std::shared_ptr<const ChatTemplates>> from_directory(const std::string& dir, const Limits& limits = {});

  bool has_template() const { return default_ != nullptr || !named_.empty(); }
  std::vector<std::string> names() const;  // "default" and the named templates
  const nlohmann::ordered_json& special_tokens() const { return special_tokens_; }

  // What transformers' apply_chat_template(messages, tools=tools,
  // add_generation_prompt=..., **kwargs) renders: `messages` a list of
  // objects; `tools` a list or null; `kwargs` an object of extra variables
  // (they override the special tokens). `name` picks a named template;
  // empty: "tool_use" when tools are given and it exists, else the default.
  Result<std::string> apply(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                            bool add_generation_prompt, const nlohmann::ordered_json& kwargs,
                            const std::string& name = {}) const;

 private:
  std::shared_ptr<const ChatTemplate> default_;
  std::map<std::string, std::shared_ptr<const ChatTemplate>> named_;
  nlohmann::ordered_json special_tokens_ = nlohmann::ordered_json::object();
};

}  // namespace gpubox::chat
