#include "kernel/comm_router.h"

#include <cstdio>
#include <string_view>

#include "base/base64.h"
#include "xeus/xguid.hpp"

namespace gpubox::kernel {
namespace {

using nlohmann::json;

// Publishes what a comm handler produces under the comm message's header.
class CommSink : public ExecutorSink {
 public:
  CommSink(IopubPublisher& publisher, const json& parent) : publisher_(publisher), parent_(parent) {}
  void stream(const std::string& name, std::string text) override {
    publisher_.publish("stream", {{"name", name}, {"text", std::move(text)}}, parent_);
  }
  void message(const json& frame) override { publisher_.publish_frame(frame, 0, parent_); }
  std::optional<std::string> input(const std::string&, bool) override { return std::nullopt; }

 private:
  IopubPublisher& publisher_;
  const json& parent_;
};

}  // namespace

CommRouter::CommRouter(xeus::xserver& server, PythonExecutor& executor, IopubPublisher& publisher)
    : server_(server), executor_(executor), publisher_(publisher), session_(xeus::new_xguid()) {}

bool CommRouter::handle(const xeus::xmessage& message) {
  const std::string msg_type = message.header().value("msg_type", "");
  if (msg_type != "comm_open" && msg_type != "comm_msg" && msg_type != "comm_close" &&
      msg_type != "comm_info_request") {
    return false;
  }
  const json& parent = message.header();
  publisher_.publish("status", {{"execution_state", "busy"}}, parent);
  // Output between requests (which the executor gives its idle sink, under the last
  // parent) belongs to this message while its handlers run, then to the last cell again.
  json last_parent = publisher_.last_parent();
  publisher_.set_last_parent(parent);
  if (msg_type == "comm_info_request") {
    serve_comm_info(message);
  } else {
    serve_comm(message, msg_type);
  }
  publisher_.set_last_parent(std::move(last_parent));
  publisher_.publish("status", {{"execution_state", "idle"}}, parent);
  return true;
}

void CommRouter::serve_comm(const xeus::xmessage& message, const std::string& msg_type) {
  json buffers = json::array();
  for (const auto& buffer : message.buffers()) buffers.push_back(base64_encode(std::string_view(buffer.data(), buffer.size())));
  json request = {{"type", "comm"},
                  {"msg_type", msg_type},
                  {"header", message.header()},
                  {"parent_header", message.parent_header()},
                  {"metadata", message.metadata()},
                  {"content", message.content()},
                  {"buffers", std::move(buffers)}};
  CommSink sink(publisher_, message.header());
  auto done = executor_.request(request, sink);
  // comm messages get no reply: a failure can only be told on the handler's stderr.
  std::string failure = !done ? done.status().message()
                        : done->value("status", "") != "ok" ? done->value("ename", "") + ": " + done->value("evalue", "")
                                                            : "";
  if (!failure.empty()) {
    publisher_.publish("stream", {{"name", "stderr"}, {"text", "gpubox kernel: " + msg_type + " failed: " + failure + "\n"}},
                       message.header());
  }
}

void CommRouter::serve_comm_info(const xeus::xmessage& message) {
  json request = {{"type", "comm_info"}};
  const json& content = message.content();
  if (auto target = content.find("target_name"); target != content.end() && target->is_string()) {
    request["target_name"] = *target;
  }
  CommSink sink(publisher_, message.header());
  auto done = executor_.request(request, sink);
  json reply;
  if (!done) {
    reply = {{"status", "error"}, {"ename", "KernelError"}, {"evalue", done.status().message()}, {"traceback", json::array()}};
  } else {
    // An executor that died meanwhile was restarted: it has no comm open.
    json comms = done->value("status", "") == "ok" ? done->value("comms", json::object()) : json::object();
    reply = {{"status", "ok"}, {"comms", std::move(comms)}};
  }
  server_.send_shell(xeus::xmessage(message.identities(), xeus::make_header("comm_info_reply", "gpubox", session_),
                                    message.header(), json::object(), std::move(reply), xeus::buffer_sequence()));
}

}  // namespace gpubox::kernel
