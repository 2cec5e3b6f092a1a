#include "model/chat/chat_template.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/stat.h>

#include <fstream>
#include <sstream>

#include "model/chat/lexer.h"
#include "model/chat/parser.h"
#include "model/chat/renderer.h"

namespace gpubox::chat {

struct ChatTemplate::Parsed {
  Body body;
};

ChatTemplate::ChatTemplate() = default;
ChatTemplate::~ChatTemplate() = default;

Result<std::shared_ptr<const ChatTemplate>> ChatTemplate::parse(std::string_view source, const Limits& limits) {
  if (source.size() > limits.max_template_bytes) {
    return Status(ErrorCode::invalid_request, fmt::format("chat_template: {} bytes is over the limit of {}", source.size(), limits.max_template_bytes));
  }
  std::shared_ptr<ChatTemplate> t(new ChatTemplate());
  t->limits_ = limits;
  t->parsed_ = std::make_unique<Parsed>();
  try {
    t->parsed_->body = chat::parse(lex(source), limits.max_depth);
  } catch (const TemplateError& e) {
    return Status(ErrorCode::invalid_request, std::string("chat_template: ") + e.what());
  }
  return std::shared_ptr<const ChatTemplate>(std::move(t));
}

Result<std::string> ChatTemplate::render(const nlohmann::ordered_json& variables) const {
  if (!variables.is_object()) return Status(ErrorCode::invalid_request, "chat template variables must be an object");
  try {
    Arena arena(limits_.max_items);
    RenderLimits limits{limits_.max_output_bytes, limits_.max_iterations, limits_.max_call_depth, limits_.max_eval_depth, limits_.max_items};
    Renderer renderer(limits, arena);
    for (const auto& [name, value] : variables.items()) renderer.set_global(name, arena.from_json(value));
    return renderer.render(parsed_->body);
  } catch (const RaisedError& e) {
    return Status(ErrorCode::invalid_request, std::string("chat template raised: ") + e.what());
  } catch (const TemplateError& e) {
    return Status(ErrorCode::invalid_request, std::string("chat_template: ") + e.what());
  } catch (const std::bad_alloc&) {
    return Status(ErrorCode::resource_exhausted, "chat_template: out of memory while rendering");
  }
}

namespace {

const char* const kSpecialTokens[] = {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"};

std::optional<std::string> read_file(const std::string& path, std::size_t limit, Status& error) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) return std::nullopt;
  if (static_cast<std::size_t>(info.st_size) > limit) {
    error = Status(ErrorCode::invalid_request, fmt::format("{}: {} bytes is over the limit of {}", path, info.st_size, limit));
    return std::nullopt;
  }
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  if (!in) {
    error = Status(ErrorCode::invalid_request, fmt::format("{}: cannot be read", path));
    return std::nullopt;
  }
  return text.str();
}

Status named_error(const char* source, const std::string& what, const Status& s) {
  return Status(s.code(), fmt::format("{}: {}: {}", source, what, s.message()));
}

}  // namespace

Result<std::shared_ptr<const ChatTemplates>> ChatTemplates::from_config(std::string_view tokenizer_config,
                                                                        std::optional<std::string_view> jinja,
                                                                        const Limits& limits) {
  auto out = std::make_shared<ChatTemplates>();
  nlohmann::ordered_json config = nlohmann::ordered_json::object();
  if (!tokenizer_config.empty()) {
    config = nlohmann::ordered_json::parse(tokenizer_config, nullptr, false);
    if (config.is_discarded() || !config.is_object()) {
      return Status(ErrorCode::invalid_request, "tokenizer_config.json: not a JSON object");
    }
  }
  for (const char* key : kSpecialTokens) {
    auto found = config.find(key);
    if (found == config.end() || found->is_null()) continue;
    if (found->is_string()) {
      out->special_tokens_[key] = *found;
    } else if (found->is_object() && found->contains("content") && (*found)["content"].is_string()) {
      out->special_tokens_[key] = (*found)["content"];  // an AddedToken written out
    } else {
      return Status(ErrorCode::invalid_request, fmt::format("tokenizer_config.json: {}: expected a string or {{\"content\": ...}}", key));
    }
  }
  if (auto found = config.find("chat_template"); found != config.end() && !found->is_null()) {
    if (found->is_string()) {
      auto t = ChatTemplate::parse(found->get<std::string>(), limits);
      if (!t) return named_error("tokenizer_config.json", "chat_template", t.status());
      out->default_ = *t;
    } else if (found->is_array()) {
      for (std::size_t k = 0; k < found->size(); ++k) {
        const auto& entry = (*found)[k];
        if (!entry.is_object() || !entry.contains("name") || !entry["name"].is_string() || !entry.contains("template") ||
            !entry["template"].is_string()) {
          return Status(ErrorCode::invalid_request, fmt::format("tokenizer_config.json: chat_template[{}]: expected {{\"name\": ..., \"template\": ...}}", k));
        }
        std::string name = entry["name"];
        auto t = ChatTemplate::parse(entry["template"].get<std::string>(), limits);
        if (!t) return named_error("tokenizer_config.json", "chat_template \"" + name + "\"", t.status());
        if (name == "default") out->default_ = *t;
        else out->named_[name] = *t;
      }
    } else {
      return Status(ErrorCode::invalid_request, "tokenizer_config.json: chat_template: expected a string or a list of {name, template}");
    }
  }
  if (jinja) {
    auto t = ChatTemplate::parse(*jinja, limits);
    if (!t) return named_error("chat_template.jinja", "template", t.status());
    out->default_ = *t;
  }
  return std::shared_ptr<const ChatTemplates>(std::move(out));
}

Result<std::shared_ptr<const ChatTemplates>> ChatTemplates::from_directory(const std::string& dir, const Limits& limits) {
  Status error;
  auto config = read_file(dir + "/tokenizer_config.json", 16 << 20, error);
  if (!error) return error;
  auto jinja = read_file(dir + "/chat_template.jinja", limits.max_template_bytes, error);
  if (!error) return error;
  if (!config && !jinja) return std::shared_ptr<const ChatTemplates>();
  std::optional<std::string_view> jinja_view;
  if (jinja) jinja_view = *jinja;
  return from_config(config ? *config : std::string(), jinja_view, limits);
}

std::vector<std::string> ChatTemplates::names() const {
  std::vector<std::string> out;
  if (default_) out.emplace_back("default");
  for (const auto& [name, t] : named_) out.push_back(name);
  return out;
}

Result<std::string> ChatTemplates::apply(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                                         bool add_generation_prompt, const nlohmann::ordered_json& kwargs,
                                         const std::string& name) const {
  const ChatTemplate* chosen = nullptr;
  if (!name.empty()) {
    if (name == "default") chosen = default_.get();
    else if (auto found = named_.find(name); found != named_.end()) chosen = found->second.get();
    if (!chosen) return Status(ErrorCode::invalid_request, fmt::format("no chat template named \"{}\" (the model has: {})", name, fmt::join(names(), ", ")));
  } else if (!tools.is_null() && named_.count("tool_use")) {
    chosen = named_.at("tool_use").get();
  } else {
    chosen = default_.get();
  }
  if (!chosen) return Status(ErrorCode::invalid_request, "the model has no chat template (tokenizer_config.json has no chat_template)");
  if (!messages.is_array()) return Status(ErrorCode::invalid_request, "messages: expected a list of {role, content} objects");
  if (messages.empty()) return Status(ErrorCode::invalid_request, "messages: the conversation is empty (give at least one message)");
  if (!tools.is_null() && !tools.is_array()) return Status(ErrorCode::invalid_request, "tools: expected a list of tool schemas");
  if (!kwargs.is_object()) return Status(ErrorCode::invalid_request, "chat template arguments: expected an object");
  for (const char* reserved : {"messages", "tools", "documents", "add_generation_prompt"}) {
    if (kwargs.contains(reserved)) return Status(ErrorCode::invalid_request, fmt::format("chat template arguments: \"{}\" is given separately", reserved));
  }
  nlohmann::ordered_json chat = nlohmann::ordered_json::array();
  static const char* const reasoning_fields[] = {"reasoning_content", "thinking", "reasoning"};
  for (std::size_t k = 0; k < messages.size(); ++k) {
    const auto& m = messages[k];
    if (!m.is_object()) return Status(ErrorCode::invalid_request, fmt::format("messages[{}]: expected an object", k));
    // As transformers does: a message's reasoning also appears as "thinking" and "reasoning_content".
    const nlohmann::ordered_json* reasoning = nullptr;
    for (const char* field : reasoning_fields) {
      if (!reasoning && m.contains(field) && !m[field].is_null()) reasoning = &m[field];
    }
    if (!reasoning) {
      chat.push_back(m);
      continue;
    }
    nlohmann::ordered_json aliased = nlohmann::ordered_json::object();
    aliased["thinking"] = *reasoning;
    for (const auto& [key, value] : m.items()) aliased[key] = value;
    aliased["reasoning_content"] = *reasoning;
    chat.push_back(std::move(aliased));
  }
  nlohmann::ordered_json variables = special_tokens_;
  for (const auto& [key, value] : kwargs.items()) variables[key] = value;
  variables["messages"] = chat;
  variables["tools"] = tools;
  variables["documents"] = nullptr;
  variables["add_generation_prompt"] = add_generation_prompt;
  return chosen->render(variables);
}

}  // namespace gpubox::chat
