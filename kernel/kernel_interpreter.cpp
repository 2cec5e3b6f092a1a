#include "kernel/kernel_interpreter.h"

#include "base/version.h"

namespace gpubox::kernel {
namespace {

using nlohmann::json;

// Publishes what an execution produces on iopub, through xeus.
class IopubSink : public ExecutorSink {
 public:
  IopubSink(xeus::xinterpreter& interpreter, IopubPublisher* publisher, int execution_count, bool silent,
            bool allow_stdin)
      : interpreter_(interpreter), publisher_(publisher), count_(execution_count), silent_(silent), allow_stdin_(allow_stdin) {}

  // Output a thread writes after this cell ends belongs to this cell, as in ipykernel.
  void started() override {
    if (publisher_ && !silent_) publisher_->set_last_parent(interpreter_.parent_header());
  }

  void stream(const std::string& name, std::string text) override {
    if (!silent_) interpreter_.publish_stream(name, text);
  }

  void message(const json& frame) override {
    const std::string type = frame.value("type", "");
    if (type == "comm") {  // a widget's messages go out even from a silent cell, as in ipykernel
      if (publisher_) publisher_->publish_frame(frame, count_, interpreter_.parent_header());
      return;
    }
    if (type == "error") {
      error_seen_ = true;
      if (silent_) return;
      std::vector<std::string> traceback;
      for (const auto& line : frame.value("traceback", json::array())) {
        if (line.is_string()) traceback.push_back(line.get<std::string>());
      }
      interpreter_.publish_execution_error(frame.value("ename", ""), frame.value("evalue", ""), traceback);
      return;
    }
    if (silent_) return;
    json data = frame.value("data", json::object());
    json metadata = frame.value("metadata", json::object());
    if (type == "display") {
      json transient = frame.value("transient", json::object());
      if (frame.value("update", false)) {
        interpreter_.update_display_data(std::move(data), std::move(metadata), std::move(transient));
      } else {
        interpreter_.display_data(std::move(data), std::move(metadata), std::move(transient));
      }
    } else if (type == "execute_result") {
      interpreter_.publish_execution_result(count_, std::move(data), std::move(metadata));
    } else if (type == "clear_output") {
      interpreter_.clear_output(frame.value("wait", false));
    }
  }

  std::optional<std::string> input(const std::string& prompt, bool password) override {
    if (!allow_stdin_) return std::nullopt;
    std::optional<std::string> value;
    interpreter_.register_input_handler([&value](const std::string& v) { value = v; });
    interpreter_.input_request(prompt, password);  // blocks until the reply or an interrupt
    interpreter_.register_input_handler(nullptr);
    return value;
  }

  bool error_seen() const { return error_seen_; }

 private:
  xeus::xinterpreter& interpreter_;
  IopubPublisher* publisher_;
  int count_;
  bool silent_;
  bool allow_stdin_;
  bool error_seen_ = false;
};

json error_reply(const json& done) {
  json traceback = done.value("traceback", json::array());
  return {{"status", "error"},
          {"ename", done.value("ename", "Error")},
          {"evalue", done.value("evalue", "")},
          {"traceback", traceback}};
}

}  // namespace

KernelInterpreter::KernelInterpreter(std::shared_ptr<PythonExecutor> executor) : executor_(std::move(executor)) {
  xeus::register_interpreter(this);
}

void KernelInterpreter::configure_impl() {}

json KernelInterpreter::execute_request_impl(int execution_counter, const std::string& code, bool silent,
                                             bool store_history, json /*user_expressions*/, bool allow_stdin) {
  // The server assigned this cell its count in the kernel's one counter (xeus's own
  // counter does not see RPC cells).
  if (counter_ && store_history && !silent) {
    if (int count = counter_->count_of(parent_header().value("msg_id", "")); count > 0) execution_counter = count;
  }
  IopubSink sink(*this, publisher_.get(), execution_counter, silent, allow_stdin);
  json request = {{"type", "execute"},       {"code", code},
                  {"silent", silent},        {"store_history", store_history},
                  {"allow_stdin", allow_stdin}, {"execution_count", execution_counter}};
  auto done = executor_->request(request, sink);
  if (!done) {
    json failed = {{"ename", "KernelError"}, {"evalue", done.status().message()},
                   {"traceback", json::array({"KernelError: " + done.status().message()})}};
    if (!silent) publish_execution_error("KernelError", done.status().message(), {failed["traceback"][0]});
    return error_reply(failed);
  }
  if (done->value("status", "") == "ok") {
    // payload: ask_exit (exit, quit()), as ipykernel sends it.
    return {{"status", "ok"}, {"payload", done->value("payload", json::array())}, {"user_expressions", json::object()}};
  }
  // The executor publishes its own error frame; a death has nobody to tell the client but us.
  if (done->value("died", false) && !silent) {
    std::vector<std::string> traceback;
    for (const auto& line : done->value("traceback", json::array())) traceback.push_back(line.get<std::string>());
    publish_execution_error(done->value("ename", ""), done->value("evalue", ""), traceback);
  }
  return error_reply(*done);
}

json KernelInterpreter::ask(json request, json fallback) {
  NullSink sink;
  auto reply = executor_->request(request, sink);
  if (!reply || reply->value("status", "") == "error") return fallback;
  reply->erase("type");
  return *reply;
}

json KernelInterpreter::complete_request_impl(const std::string& code, int cursor_pos) {
  return ask({{"type", "complete"}, {"code", code}, {"cursor_pos", cursor_pos}},
             {{"status", "ok"}, {"matches", json::array()}, {"cursor_start", cursor_pos},
              {"cursor_end", cursor_pos}, {"metadata", json::object()}});
}

json KernelInterpreter::inspect_request_impl(const std::string& code, int cursor_pos, int detail_level) {
  return ask({{"type", "inspect"}, {"code", code}, {"cursor_pos", cursor_pos}, {"detail_level", detail_level}},
             {{"status", "ok"}, {"found", false}, {"data", json::object()}, {"metadata", json::object()}});
}

json KernelInterpreter::is_complete_request_impl(const std::string& code) {
  return ask({{"type", "is_complete"}, {"code", code}}, {{"status", "unknown"}});
}

json KernelInterpreter::language_info(const json& executor_info) {
  return {{"name", "python"},
          {"version", executor_info.value("python_version", "3")},
          {"mimetype", "text/x-python"},
          {"file_extension", ".py"},
          {"pygments_lexer", "ipython3"},
          {"codemirror_mode", {{"name", "ipython"}, {"version", 3}}},
          {"nbconvert_exporter", "python"}};
}

json KernelInterpreter::kernel_info_request_impl() { return kernel_info(); }

json KernelInterpreter::kernel_info() const {
  json info = executor_->info();
  return {{"status", "ok"},
          {"implementation", "gpubox"},
          {"implementation_version", kVersion},
          {"language_info", language_info(info)},
          {"banner", std::string("gpubox kernel ") + kVersion + " (Python, " +
                         info.value("implementation", "starting") + " mode)"},
          {"help_links", json::array()},
          {"debugger", false}};
}

void KernelInterpreter::shutdown_request_impl() { executor_->stop(); }

}  // namespace gpubox::kernel
