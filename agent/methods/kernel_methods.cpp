// kernel.* RPC methods (rpc/PROTOCOL.md, "Kernel"): run code in the agent's
// Jupyter kernel and ask it questions. Run on worker threads; the executor
// takes one request at a time, Jupyter clients' cells included.
#include "agent/methods/methods.h"
#include "kernel/agent_kernel.h"
#include "rpc/params.h"

namespace gpubox {
namespace {

using nlohmann::json;

// Streams what a cell produces to the RPC caller as DATA items; a caller that
// goes away interrupts the cell.
class RpcSink : public kernel::ExecutorSink {
 public:
  RpcSink(rpc::CallContext& call, kernel::AgentKernel& kernel) : call_(call), kernel_(kernel) {}

  void stream(const std::string& name, std::string text) override {
    send({{"stream", name}, {"text", std::move(text)}});
  }

  void message(const json& frame) override {
    json item = frame;
    item["kind"] = item.value("type", "");
    item.erase("type");
    send(item);
  }

  std::optional<std::string> input(const std::string&, bool) override { return std::nullopt; }

 private:
  void send(const json& item) {
    if (gone_) return;
    if (!call_.send_data(item)) {
      gone_ = true;
      kernel_.interrupt();
    }
  }

  rpc::CallContext& call_;
  kernel::AgentKernel& kernel_;
  bool gone_ = false;
};

Result<kernel::AgentKernel*> kernel_or_error(const std::function<kernel::AgentKernel*()>& kernel) {
  kernel::AgentKernel* k = kernel ? kernel() : nullptr;
  if (!k) return Status(ErrorCode::unavailable, "the kernel is disabled (config kernel.enabled) or not running");
  return k;
}

// complete / inspect: params code and cursor_pos (default: the end of code).
Result<json> ask(rpc::CallContext& call, kernel::AgentKernel& kernel, const std::string& type) {
  rpc::ParamReader params(call.params());
  auto code = params.string("code", true);
  auto cursor = params.integer("cursor_pos", 0, 1 << 30);
  std::optional<std::int64_t> detail;
  if (type == "inspect") detail = params.integer("detail_level", 0, 1);
  if (Status status = params.finish(); !status) return status;
  json request = {{"type", type}, {"code", *code}, {"cursor_pos", cursor ? *cursor : static_cast<std::int64_t>(code->size())}};
  if (detail) request["detail_level"] = *detail;
  kernel::NullSink sink;
  auto reply = kernel.executor().request(request, sink);
  if (!reply) return reply.status();
  reply->erase("type");
  return *reply;
}

}  // namespace

void add_kernel_methods(rpc::MethodRegistry& methods, std::function<kernel::AgentKernel*()> get_kernel,
                        std::chrono::milliseconds default_timeout) {
  methods.add("kernel.execute", [get_kernel, default_timeout](rpc::CallContext& call) -> Result<json> {
    rpc::ParamReader params(call.params());
    auto code = params.string("code");
    auto hidden = params.boolean("hidden");
    auto setup = params.boolean("setup");
    auto timeout = params.number("timeout_s", 0, 30 * 86400);
    if (Status status = params.finish(); !status) return status;
    // A cell beyond the body limit comes as the CALL's attachments instead.
    if (code.has_value() == !call.attachments().empty()) {
      return Status(ErrorCode::invalid_request, "params.code: give the code either as code or as the CALL's attachments (one of them)");
    }
    if (!code) {
      code.emplace();
      for (const auto& part : call.attachments()) code->append(static_cast<const char*>(part.data()), part.size());
      try {
        (void)json(*code).dump();  // throws on bytes that are not UTF-8
      } catch (const json::exception&) {
        return Status(ErrorCode::invalid_request, "params.code: the code in the attachments is not UTF-8 text");
      }
    }
    auto kernel = kernel_or_error(get_kernel);
    if (!kernel) return kernel.status();
    bool is_hidden = hidden.value_or(false);
    if (setup.value_or(false) && !is_hidden) {
      return Status(ErrorCode::invalid_request, "params.setup: only hidden executions are replayed as setup (set hidden: true)");
    }
    int count = is_hidden ? 0 : (*kernel)->next_execution_count();
    json request = {{"type", "execute"},     {"code", *code},   {"silent", false}, {"store_history", !is_hidden},
                    {"allow_stdin", false}, {"execution_count", count}};
    if (setup.value_or(false)) request["setup"] = true;
    std::optional<std::chrono::milliseconds> limit;
    if (timeout && *timeout > 0) {
      limit = std::chrono::milliseconds(static_cast<long long>(*timeout * 1000));
    } else if (default_timeout.count() > 0) {
      limit = default_timeout;
    }
    RpcSink sink(call, **kernel);
    auto done = (*kernel)->execute(request, sink, limit);  // broadcast on iopub unless hidden
    if (!done) return done.status();
    json result = {{"status", done->value("status", "error")}};
    if (!is_hidden) result["execution_count"] = count;
    for (const char* key : {"ename", "evalue", "traceback", "died", "timed_out", "payload"}) {
      if (done->contains(key)) result[key] = (*done)[key];
    }
    return result;
  });

  methods.add("kernel.interrupt", [get_kernel](rpc::CallContext& call) -> Result<json> {
    rpc::ParamReader params(call.params());
    if (Status status = params.finish(); !status) return status;
    auto kernel = kernel_or_error(get_kernel);
    if (!kernel) return kernel.status();
    bool busy = (*kernel)->executor().busy();
    (*kernel)->interrupt();
    return json{{"interrupted", busy}};
  });

  methods.add("kernel.restart", [get_kernel](rpc::CallContext& call) -> Result<json> {
    rpc::ParamReader params(call.params());
    if (Status status = params.finish(); !status) return status;
    auto kernel = kernel_or_error(get_kernel);
    if (!kernel) return kernel.status();
    (*kernel)->interrupt();
    if (Status restarted = (*kernel)->executor().restart(); !restarted) return restarted;
    return json{{"restarted", true}, {"restarts", (*kernel)->executor().restarts()}};
  });

  methods.add("kernel.complete", [get_kernel](rpc::CallContext& call) -> Result<json> {
    auto kernel = kernel_or_error(get_kernel);
    if (!kernel) return kernel.status();
    return ask(call, **kernel, "complete");
  });

  methods.add("kernel.inspect", [get_kernel](rpc::CallContext& call) -> Result<json> {
    auto kernel = kernel_or_error(get_kernel);
    if (!kernel) return kernel.status();
    return ask(call, **kernel, "inspect");
  });

  methods.add("kernel.info", [get_kernel](rpc::CallContext& call) -> Result<json> {
    rpc::ParamReader params(call.params());
    if (Status status = params.finish(); !status) return status;
    auto kernel = kernel_or_error(get_kernel);
    if (!kernel) return kernel.status();
    return (*kernel)->info();
  });
}

}  // namespace gpubox
