#include "agent/model_status_poller.h"

#include <memory>

#include "base/thread_annotations.h"
#include "rpc/client.h"

namespace gpubox {

ModelStatusPoller::ModelStatusPoller(std::string endpoint, Callbacks callbacks)
    : endpoint_(std::move(endpoint)), callbacks_(std::move(callbacks)), thread_([this] { run(); }) {}

ModelStatusPoller::~ModelStatusPoller() {
  {
    MutexLock lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void ModelStatusPoller::poke() {
  {
    MutexLock lock(mutex_);
    poked_ = true;
  }
  wake_.notify_all();
}

void ModelStatusPoller::run() {
  using Clock = std::chrono::steady_clock;
  std::unique_ptr<rpc::Client> client;
  std::uint64_t client_generation = 0;
  Clock::time_point last_answer{};  // of the current generation, when answered
  bool answered = false;
  Target target;
  while (true) {
    {
      MutexLock lock(mutex_);
      auto tick = target.generation && !target.loading ? std::chrono::milliseconds(1000) : std::chrono::milliseconds(250);
      wake_.wait_for(lock, tick, [this]() REQUIRES(mutex_) { return stop_ || poked_; });
      if (stop_) return;
      poked_ = false;
    }
    target = callbacks_.target();
    if (target.generation != client_generation) {
      // A new process (or none): the old connection's replies would be about the old one.
      client.reset();
      client_generation = target.generation;
      answered = false;
    }
    if (!target.generation) continue;
    if (!client) {
      rpc::ClientOptions options;
      options.endpoint = endpoint_;
      options.connect_timeout = std::chrono::milliseconds(1000);
      auto connected = rpc::Client::connect(options);
      // Not bound yet (starting), or bound but not answering the handshake (hung).
      if (connected) client = std::move(*connected);
    }
    if (client) {
      rpc::CallOptions call;
      call.wait = std::chrono::milliseconds(3000);
      auto status = client->call("modeld.status", nlohmann::json::object(), std::move(call));
      if (status) {
        last_answer = Clock::now();
        answered = true;
        callbacks_.on_status(target.generation, *status);
        continue;
      }
      // A call that timed out leaves its late answer queued on the connection: start afresh.
      client.reset();
    }
    if (answered && Clock::now() - last_answer > kUnresponsiveAfter) {
      callbacks_.on_unresponsive(target.generation);
      answered = false;
    }
  }
}

}  // namespace gpubox
