#include "host/mcp/model_ops.h"

#include <cstdint>
#include <cstring>
#include <regex>

namespace gpubox::mcp {
namespace {

using nlohmann::json;

// Fields that hold a tensor (hooks/README.md, "Operations").
constexpr const char* kTensorFields[] = {"value", "vector", "direction"};

// Appends value's numbers (C order) to out and checks that the nesting is rectangular; shape is the first row's.
Status flatten(const json& value, std::size_t depth, std::vector<std::int64_t>& shape, std::vector<float>& out,
               const std::string& where) {
  if (value.is_number()) {
    if (depth != shape.size()) return Status::invalid_request(where + ": the nested lists are not all of one shape");
    out.push_back(value.get<float>());
    return Status::ok();
  }
  if (!value.is_array() || value.empty()) {
    return Status::invalid_request(where + ": expected a number or nested lists of numbers (a tensor), got " +
                                   value.dump().substr(0, 80));
  }
  if (depth == shape.size()) {
    if (!out.empty()) return Status::invalid_request(where + ": the nested lists are not all of one shape");
    shape.push_back(static_cast<std::int64_t>(value.size()));
  } else if (depth > shape.size() || shape[depth] != static_cast<std::int64_t>(value.size())) {
    return Status::invalid_request(where + ": the nested lists are not all of one shape");
  }
  for (const auto& item : value) {
    if (Status nested = flatten(item, depth + 1, shape, out, where); !nested) return nested;
  }
  return Status::ok();
}

// A tensor field made into its wire descriptor, its bytes appended to attachments.
Result<json> tensor(const json& value, const std::string& where, std::vector<std::string>& attachments) {
  if (value.is_object()) {
    return Status::invalid_request(where + ": give the tensor's values as nested lists of numbers (no attachments here)");
  }
  std::vector<std::int64_t> shape;
  std::vector<float> values;
  if (Status flat = flatten(value, 0, shape, values, where); !flat) return flat;
  std::string bytes(values.size() * sizeof(float), '\0');
  if (!values.empty()) std::memcpy(bytes.data(), values.data(), bytes.size());  // little-endian hosts only
  attachments.push_back(std::move(bytes));
  return json{{"dtype", "float32"}, {"shape", shape}, {"attachment", attachments.size() - 1}};
}

}  // namespace

Result<WireOps> encode_model_ops(const json& ops, const json& captures, const json& positions) {
  WireOps wire;
  if (ops.is_array()) {
    for (std::size_t i = 0; i < ops.size(); ++i) {
      json op = ops[i];
      std::string where = "ops[" + std::to_string(i) + "]";
      if (!op.is_object()) return Status::invalid_request(where + ": expected an op object ({\"op\", \"hook\", ...})");
      for (const char* field : kTensorFields) {
        if (!op.contains(field)) continue;
        auto made = tensor(op[field], where + "." + field, wire.attachments);
        if (!made) return made.status();
        op[field] = std::move(*made);
      }
      if (op.value("op", "") == "fn") {
        if (op.contains("fn") && !op["fn"].is_string()) {
          return Status::invalid_request(where + ".fn: the name of a function loaded for the model with model.fn_load "
                                                 "(Python: client.model(NAME).fn_load(FN_NAME, fn)); code cannot be sent here");
        }
        if (op.contains("extra") && op["extra"].is_object()) {
          for (auto& [name, value] : op["extra"].items()) {
            auto made = tensor(value, where + ".extra." + name, wire.attachments);
            if (!made) return made.status();
            value = std::move(*made);
          }
        }
      }
      wire.ops.push_back(std::move(op));
    }
  }
  wire.user_ops = wire.ops.size();
  if (captures.is_array()) {
    for (const auto& hook : captures) {
      json op = {{"op", "capture"}, {"hook", hook}};
      if (positions.is_array()) op["positions"] = positions;
      wire.ops.push_back(std::move(op));
    }
  }
  return wire;
}

std::string ops_in_tool_words(std::string message, std::size_t user_ops) {
  static const std::regex kOp(R"(params\.ops\[(\d+)\])");
  std::string out;
  auto begin = std::sregex_iterator(message.begin(), message.end(), kOp);
  std::size_t last = 0;
  for (auto it = begin; it != std::sregex_iterator(); ++it) {
    std::size_t index = std::stoul((*it)[1].str());
    out += message.substr(last, static_cast<std::size_t>(it->position()) - last);
    out += index < user_ops ? "ops[" + std::to_string(index) + "]" : "captures[" + std::to_string(index - user_ops) + "]";
    last = static_cast<std::size_t>(it->position() + it->length());
  }
  return out + message.substr(last);
}

}  // namespace gpubox::mcp
