#include "agent/serve/worker_process.h"

#include <unistd.h>

namespace gpubox::serve {

using nlohmann::json;

void signal_event(int fd) {
  std::uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(fd, &one, sizeof one);
}

void drain_event(int fd) {
  std::uint64_t value = 0;
  [[maybe_unused]] ssize_t n = ::read(fd, &value, sizeof value);
}

std::string body_string(const json& body, const char* key) {
  auto it = body.find(key);
  return it != body.end() && it->is_string() ? it->get<std::string>() : std::string();
}

std::optional<Result<json>> outcome(WireMessage& message, rpc::CallContext& call) {
  std::string op = body_string(message.body, "op");
  if (op == "result") {
    if (message.body.contains("items")) return Result<json>(json{{"items", message.body["items"]}});
    call.set_result_attachments(std::move(message.attachments));
    return Result<json>(json{{"value", message.body.value("value", json())}});
  }
  if (op == "raised") {
    std::string type = body_string(message.body, "type");
    std::string text = body_string(message.body, "message");
    call.set_error_details({{"type", type}, {"message", text}, {"traceback", body_string(message.body, "traceback")}});
    return Result<json>(Status(ErrorCode::raised, type + (text.empty() ? "" : ": " + text)));
  }
  if (op == "error") {
    auto code = error_code_from_name(body_string(message.body, "code"));
    return Result<json>(Status(code.value_or(ErrorCode::internal), body_string(message.body, "message")));
  }
  return std::nullopt;
}

}  // namespace gpubox::serve
