// ParamReader: validates a method's params (a msgpack map decoded to JSON).
// Each getter checks one field; the first problem is kept and reported by
// status() as invalid_request naming the field ("params.timeout_s: expected a
// number ≥ 0, got \"x\""). finish() also refuses fields the method does not
// know. Used by one handler on its own thread.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "base/status.h"

namespace gpubox::rpc {

class ParamReader {
 public:
  explicit ParamReader(const nlohmann::json& params) : params_(params) {}

  std::optional<std::string> string(const std::string& name, bool required = false);
  // A msgpack bin, or a str (taken as its bytes).
  std::optional<std::string> bytes(const std::string& name, bool required = false);
  std::optional<bool> boolean(const std::string& name);
  std::optional<std::int64_t> integer(const std::string& name, std::int64_t min, std::int64_t max, bool required = false);
  std::optional<double> number(const std::string& name, double min, double max);
  std::optional<std::vector<std::string>> string_list(const std::string& name, bool required = false);
  std::optional<std::map<std::string, std::string>> string_map(const std::string& name);
  // An absolute path without NUL bytes.
  std::optional<std::string> path(const std::string& name, bool required = true);
  // A field whose value the method checks itself (any type).
  const nlohmann::json* raw(const std::string& name);

  // Refuses fields no getter asked for; then the first problem, or ok.
  Status finish();
  Status status() const { return status_; }
  bool ok() const { return status_.is_ok(); }

 private:
  const nlohmann::json* find(const std::string& name, bool required);
  void fail(const std::string& name, const std::string& expected, const nlohmann::json* got);

  const nlohmann::json& params_;
  std::set<std::string> known_;
  Status status_;
};

// Binary JSON value holding bytes (msgpack bin on the wire).
nlohmann::json binary(std::string_view bytes);

}  // namespace gpubox::rpc
