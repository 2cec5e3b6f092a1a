#include "model/tokenizer/json_reader.h"

namespace gpubox::tokenizer {
namespace {

std::string child(const std::string& path, const std::string& key) { return path.empty() ? key : path + "." + key; }

}  // namespace

void JsonNode::fail(const std::string& problem) const {
  throw LoadError((path_.empty() ? std::string("(top level)") : path_) + ": " + problem);
}

JsonNode JsonNode::at(const std::string& key) const {
  if (!value_->is_object()) fail("expected an object");
  auto it = value_->find(key);
  if (it == value_->end()) fail("missing field \"" + key + "\"");
  return JsonNode(*it, child(path_, key));
}

std::optional<JsonNode> JsonNode::get(const std::string& key) const {
  if (!value_->is_object()) fail("expected an object");
  auto it = value_->find(key);
  if (it == value_->end() || it->is_null()) return std::nullopt;
  return JsonNode(*it, child(path_, key));
}

std::string JsonNode::str() const {
  if (!value_->is_string()) fail("expected a string");
  return value_->get<std::string>();
}

bool JsonNode::boolean() const {
  if (!value_->is_boolean()) fail("expected true or false");
  return value_->get<bool>();
}

std::int64_t JsonNode::integer() const {
  if (value_->is_number_unsigned()) {
    auto v = value_->get<std::uint64_t>();
    if (v > static_cast<std::uint64_t>(INT64_MAX)) fail("integer out of range");
    return static_cast<std::int64_t>(v);
  }
  if (!value_->is_number_integer()) fail("expected an integer");
  return value_->get<std::int64_t>();
}

std::int32_t JsonNode::id() const {
  std::int64_t v = integer();
  if (v < 0 || v > INT32_MAX) fail("expected a token id in [0, 2^31)");
  return static_cast<std::int32_t>(v);
}

std::vector<JsonNode> JsonNode::elements() const {
  if (!value_->is_array()) fail("expected an array");
  std::vector<JsonNode> out;
  out.reserve(value_->size());
  for (std::size_t i = 0; i < value_->size(); ++i) out.emplace_back((*value_)[i], path_ + "[" + std::to_string(i) + "]");
  return out;
}

std::vector<std::pair<std::string, JsonNode>> JsonNode::members() const {
  if (!value_->is_object()) fail("expected an object");
  std::vector<std::pair<std::string, JsonNode>> out;
  out.reserve(value_->size());
  for (auto it = value_->begin(); it != value_->end(); ++it) out.emplace_back(it.key(), JsonNode(it.value(), child(path_, it.key())));
  return out;
}

std::string JsonNode::opt_str(const std::string& key, const std::string& fallback) const {
  auto v = get(key);
  return v ? v->str() : fallback;
}

bool JsonNode::opt_bool(const std::string& key, bool fallback) const {
  auto v = get(key);
  return v ? v->boolean() : fallback;
}

}  // namespace gpubox::tokenizer
