#include "host/mcp/server.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <exception>

#include "base/fd.h"

namespace gpubox::mcp {

void Output::write(const json& message) {
  std::string text = serialize(message) + "\n";
  MutexLock lock(mutex_);
  (void)write_fully(fd_, text.data(), text.size());
}

// One tools/call in flight: its cancel flag and its progress notifications.
class Server::Call : public ToolCallContext {
 public:
  Call(CallRequest request, Output& output) : request_(std::move(request)), output_(output) {}

  bool cancelled() const override { return cancelled_.load(); }
  void cancel() { cancelled_ = true; }
  void progress(const std::string& message) override {
    if (request_.progress_token.is_null()) return;
    json params = {{"progressToken", request_.progress_token}, {"progress", ++progress_}, {"message", message}};
    output_.write(make_notification("notifications/progress", std::move(params)));
  }
  const CallRequest& request() const { return request_; }
  // Atomics, no lock: done is set by the call's thread and polled by the
  // reader's; cancelled_ set by the reader, polled by the tool; progress_
  // counted by whichever thread the tool reports from.
  std::atomic<bool> done{false};

 private:
  CallRequest request_;
  Output& output_;
  std::atomic<bool> cancelled_{false};
  std::atomic<long long> progress_{0};
};

namespace {

std::string id_key(const json& id) { return id.dump(); }

}  // namespace

Server::Server(Toolbox& tools, ServerIdentity identity, int in_fd, int out_fd)
    : tools_(tools), dispatcher_(tools, std::move(identity)), in_fd_(in_fd), output_(out_fd) {}

Server::~Server() {
  for (auto& [call, thread] : threads_) {
    call->cancel();
    if (thread.joinable()) thread.join();
  }
}

int Server::run() {
  std::string buffer;
  char chunk[65536];
  bool oversized = false;  // discarding the rest of a line past the limit
  while (true) {
    ssize_t n = ::read(in_fd_, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    buffer.append(chunk, static_cast<std::size_t>(n));
    std::size_t start = 0;
    for (std::size_t newline; (newline = buffer.find('\n', start)) != std::string::npos; start = newline + 1) {
      if (oversized) {
        oversized = false;
        continue;
      }
      Dispatcher::Outcome outcome = dispatcher_.handle(std::string_view(buffer).substr(start, newline - start));
      if (outcome.reply) output_.write(*outcome.reply);
      if (outcome.cancel) cancel_call(*outcome.cancel);
      if (outcome.call) start_call(std::move(*outcome.call));
    }
    buffer.erase(0, start);
    if (buffer.size() > kMaxLineBytes) {
      output_.write(make_error(nullptr, rpc_error::kInvalidRequest, "message too large (over 64 MiB)"));
      buffer.clear();
      oversized = true;
    }
    reap_finished();
  }
  // End of input: the client is gone; stop what still runs (a cell is interrupted) and wait for it.
  {
    MutexLock lock(calls_mutex_);
    for (auto& [key, call] : calls_) call->cancel();
  }
  for (auto& [call, thread] : threads_) {
    if (thread.joinable()) thread.join();
  }
  threads_.clear();
  return 0;
}

void Server::start_call(CallRequest incoming) {
  std::string key = id_key(incoming.id);
  auto call = std::make_shared<Call>(std::move(incoming), output_);
  {
    MutexLock lock(calls_mutex_);
    if (calls_.count(key)) {
      output_.write(make_error(call->request().id, rpc_error::kInvalidRequest,
                               "invalid request: id " + key + " is already in flight on this connection"));
      return;
    }
    calls_[key] = call;
  }
  std::thread thread([this, call, key] {
    const CallRequest& request = call->request();
    ToolResult result;
    try {
      result = tools_.call(request.tool, request.arguments, *call);
    } catch (const std::exception& e) {
      result = ToolResult::error(std::string("internal error in ") + request.tool + ": " + e.what());
    }
    {
      MutexLock lock(calls_mutex_);
      calls_.erase(key);
    }
    // A cancelled request gets no response (MCP, "Cancellation").
    if (!call->cancelled()) {
      json body = result.to_json();
      if (request.modern) body["resultType"] = "complete";
      output_.write(make_result(request.id, std::move(body)));
    }
    call->done = true;
  });
  threads_.emplace_back(call, std::move(thread));
}

void Server::cancel_call(const json& id) {
  MutexLock lock(calls_mutex_);
  auto found = calls_.find(id_key(id));
  if (found != calls_.end()) found->second->cancel();
}

void Server::reap_finished() {
  for (auto it = threads_.begin(); it != threads_.end();) {
    if (it->first->done) {
      it->second.join();
      it = threads_.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace gpubox::mcp
