// JsonNode: read-only access to a parsed tokenizer.json that knows its JSON
// path, so that every complaint names where it is ("model.merges[17]").
// Accessors throw LoadError; Tokenizer::from_json turns it into a Status.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace gpubox::tokenizer {

// A malformed or unsupported tokenizer.json; what() is "json.path: problem".
class LoadError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class JsonNode {
 public:
  JsonNode(const nlohmann::json& value, std::string path) : value_(&value), path_(std::move(path)) {}

  const std::string& path() const { return path_; }
  const nlohmann::json& raw() const { return *value_; }
  bool is_null() const { return value_->is_null(); }
  bool is_string() const { return value_->is_string(); }
  bool is_array() const { return value_->is_array(); }
  bool is_object() const { return value_->is_object(); }

  // A required field of an object.
  JsonNode at(const std::string& key) const;
  // A field that may be absent or null.
  std::optional<JsonNode> get(const std::string& key) const;
  std::string str() const;
  bool boolean() const;
  std::int64_t integer() const;
  std::int32_t id() const;  // an integer in [0, 2^31)
  std::vector<JsonNode> elements() const;  // of an array
  std::vector<std::pair<std::string, JsonNode>> members() const;  // of an object

  std::string opt_str(const std::string& key, const std::string& fallback) const;
  bool opt_bool(const std::string& key, bool fallback) const;
  // The "type" field of a component.
  std::string type() const { return at("type").str(); }

  [[noreturn]] void fail(const std::string& problem) const;

 private:
  const nlohmann::json* value_;
  std::string path_;
};

}  // namespace gpubox::tokenizer
