#include "kernel/iopub_publisher.h"

#include "base/base64.h"
#include "xeus/xguid.hpp"
#include "xeus/xmessage.hpp"
#include "xeus/xserver.hpp"

namespace gpubox::kernel {

using nlohmann::json;

namespace {
constexpr char kUserName[] = "gpubox";
}

IopubPublisher::IopubPublisher(xeus::xserver& server) : server_(server), session_(xeus::new_xguid()) {}

void IopubPublisher::publish(const std::string& msg_type, json content, const json& parent, json metadata,
                             xeus::buffer_sequence buffers) {
  xeus::xpub_message message("kernel.gpubox." + msg_type, xeus::make_header(msg_type, kUserName, session_), parent,
                             std::move(metadata), std::move(content), std::move(buffers));
  server_.publish(std::move(message), xeus::channel::SHELL);
}

void IopubPublisher::publish_frame(const json& frame, int execution_count, const json& parent) {
  const std::string type = frame.value("type", "");
  json data = frame.value("data", json::object());
  json metadata = frame.value("metadata", json::object());
  if (type == "display") {
    json content = {{"data", std::move(data)}, {"metadata", std::move(metadata)},
                    {"transient", frame.value("transient", json::object())}};
    publish(frame.value("update", false) ? "update_display_data" : "display_data", std::move(content), parent);
  } else if (type == "execute_result") {
    publish("execute_result", {{"execution_count", execution_count}, {"data", std::move(data)}, {"metadata", std::move(metadata)}},
            parent);
  } else if (type == "clear_output") {
    publish("clear_output", {{"wait", frame.value("wait", false)}}, parent);
  } else if (type == "comm") {
    const std::string msg_type = frame.value("msg_type", "");
    if (msg_type != "comm_open" && msg_type != "comm_msg" && msg_type != "comm_close") return;
    xeus::buffer_sequence buffers;
    for (const auto& encoded : frame.value("buffers", json::array())) {
      auto bytes = encoded.is_string() ? base64_decode(encoded.get<std::string>()) : std::nullopt;
      if (!bytes) return;  // the executor encodes every buffer: a bad one means a broken frame
      buffers.emplace_back(bytes->begin(), bytes->end());
    }
    publish(msg_type, frame.value("content", json::object()), parent, std::move(metadata), std::move(buffers));
  } else if (type == "error") {
    publish("error", {{"ename", frame.value("ename", "")}, {"evalue", frame.value("evalue", "")},
                      {"traceback", frame.value("traceback", json::array())}},
            parent);
  }
}

void IopubPublisher::set_last_parent(json parent) {
  MutexLock lock(mutex_);
  last_parent_ = std::move(parent);
}

json IopubPublisher::last_parent() const {
  MutexLock lock(mutex_);
  return last_parent_;
}

json IopubPublisher::rpc_request_header() const {
  return xeus::make_header("execute_request", "rpc", session_);
}

void IdleOutputSink::stream(const std::string& name, std::string text) {
  publisher_->publish("stream", {{"name", name}, {"text", std::move(text)}}, publisher_->last_parent());
}

void IdleOutputSink::message(const json& frame) { publisher_->publish_frame(frame, 0, publisher_->last_parent()); }

void BroadcastSink::stream(const std::string& name, std::string text) {
  publisher_.publish("stream", {{"name", name}, {"text", text}}, parent_);
  caller_.stream(name, std::move(text));
}

void BroadcastSink::message(const json& frame) {
  publisher_.publish_frame(frame, count_, parent_);
  if (frame.value("type", "") == "comm") return;  // for Jupyter frontends only: an RPC caller has no comms
  caller_.message(frame);
}

void BroadcastSink::started() {
  publisher_.set_last_parent(parent_);
  caller_.started();
}

}  // namespace gpubox::kernel
