#include "model/weights/weight_map.h"

#include <set>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/weights/checkpoint.h"

namespace gpubox::weights {
namespace {

using nlohmann::json;

Status refuse_weight_map(const std::string& label, const std::string& what) {
  return Status(ErrorCode::invalid_request, label + ": " + what);
}

}  // namespace

bool is_plain_file_name(std::string_view name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string_view::npos &&
         name.find('\0') == std::string_view::npos;
}

Result<std::map<std::string, std::string>> parse_weight_map(std::string_view text, const std::string& label) {
  std::string duplicate;
  std::vector<std::set<std::string>> open_objects;
  auto check = [&](int /*depth*/, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::object_start) open_objects.emplace_back();
    if (event == json::parse_event_t::object_end && !open_objects.empty()) open_objects.pop_back();
    if (event == json::parse_event_t::key && !open_objects.empty() && parsed.is_string() &&
        !open_objects.back().insert(parsed.get<std::string>()).second && duplicate.empty()) {
      duplicate = parsed.get<std::string>();
    }
    return true;
  };
  // nlohmann stops at a NUL byte as if the input ended there.
  if (text.find('\0') != std::string_view::npos) return refuse_weight_map(label, "not valid JSON: it holds a NUL byte");
  json index;
  try {
    index = json::parse(text.begin(), text.end(), check);
  } catch (const json::exception& e) {
    return refuse_weight_map(label, std::string("not valid JSON: ") + e.what());
  }
  if (!duplicate.empty()) return refuse_weight_map(label, "key '" + duplicate + "' appears twice");
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
    return refuse_weight_map(label, "no \"weight_map\" object");
  }
  std::map<std::string, std::string> weight_map;
  for (const auto& item : index["weight_map"].items()) {
    if (!item.value().is_string()) {
      return refuse_weight_map(label, "weight_map '" + item.key() + "' is not a file name (a string)");
    }
    const auto& file = item.value().get_ref<const std::string&>();
    if (!is_plain_file_name(file)) {
      return refuse_weight_map(label, "weight_map '" + item.key() + "' names '" + file + "', not a file inside the model directory");
    }
    weight_map.emplace(item.key(), file);
  }
  return weight_map;
}

}  // namespace gpubox::weights
