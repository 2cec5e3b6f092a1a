// fake_modeld: a test double of gpubox-modeld for the agent's model host
// tests. Same command line (--endpoint ipc://… --config modeld.json), the
// gpubox RPC protocol on that endpoint, and:
//   modeld.status   {"pid", "models": [...]}: each configured model "ready", or
//                   "loading" for FAKE_MODELD_LOAD_MS after the start; a model
//                   named "broken*" "failed" with an error naming its path
//   model.echo      the params back as {"params"}, the attachments back as the RESULT's
//   model.count     {"n"}: n DATA {"i"}, each waiting for the caller's credit
//   model.sleep     {"ms"}: waits (stoppable); records the timeout it was given
//   model.upload    streamed DATA in (credit 2 at a time) until {"eof": true}: {"bytes", "items"}
//   model.fail      an ERROR naming every model's path
//   model.crash     abort()
//   model.stats     {"count_sent", "last_stop", "last_timeout_ms", "calls"}
// FAKE_MODELD_START_DELAY_MS delays binding (a host that starts slowly).
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>

#include "rpc/inbound_stream.h"
#include "rpc/params.h"
#include "rpc/server.h"
#include "base/thread_annotations.h"

namespace {

using nlohmann::json;
using namespace gpubox;

long env_ms(const char* name) {
  const char* value = std::getenv(name);
  return value ? std::atol(value) : 0;
}

struct Record {
  Mutex mutex;
  std::string last_stop GUARDED_BY(mutex);
  long long last_timeout_ms GUARDED_BY(mutex) = -1;
  std::atomic<long long> count_sent{0};
  std::atomic<long long> calls{0};

  void stopped(const Status& reason) {
    MutexLock lock(mutex);
    last_stop = std::string(error_code_name(reason.code()));
  }
};

long long timeout_ms_of(rpc::CallContext& call) {
  auto deadline = call.deadline();
  if (!deadline) return 0;
  return std::chrono::duration_cast<std::chrono::milliseconds>(*deadline - rpc::Clock::now()).count() + 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string endpoint, config_path;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    if (flag == "--endpoint") endpoint = argv[i + 1];
    if (flag == "--config") config_path = argv[i + 1];
  }
  if (endpoint.empty() || config_path.empty()) {
    std::fprintf(stderr, "usage: fake_modeld --endpoint ipc://PATH --config FILE\n");
    return 2;
  }
  json config;
  try {
    std::ifstream in(config_path);
    config = json::parse(in);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fake_modeld: %s: %s\n", config_path.c_str(), e.what());
    return 2;
  }
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::this_thread::sleep_for(std::chrono::milliseconds(env_ms("FAKE_MODELD_START_DELAY_MS")));

  auto started = std::chrono::steady_clock::now();
  auto load_time = std::chrono::milliseconds(env_ms("FAKE_MODELD_LOAD_MS"));
  Record record;
  rpc::MethodRegistry methods;

  methods.add("modeld.status", [&](rpc::CallContext&) -> Result<json> {
    bool loaded = std::chrono::steady_clock::now() - started >= load_time;
    json models = json::array();
    for (const auto& model : config["models"]) {
      std::string name = model["name"];
      json entry = {{"name", name}, {"bytes_total", 100}, {"tensors_total", 1}};
      bool broken = name.rfind("broken", 0) == 0;
      entry["state"] = broken ? "failed" : loaded ? "ready" : "loading";
      entry["bytes_loaded"] = loaded ? 100 : 0;
      entry["tensors_loaded"] = loaded ? 1 : 0;
      if (broken) entry["error"] = "cannot open " + model["path"].get<std::string>() + "/config.json";
      models.push_back(std::move(entry));
    }
    return json{{"pid", static_cast<int>(::getpid())}, {"models", std::move(models)}};
  });

  methods.add("model.echo", [&](rpc::CallContext& call) -> Result<json> {
    ++record.calls;
    call.set_result_attachments(std::move(call.attachments()));
    return json{{"params", call.params()}};
  });

  methods.add("model.count", [&](rpc::CallContext& call) -> Result<json> {
    ++record.calls;
    record.count_sent = 0;
    long long n = call.params().value("n", 0LL);
    for (long long i = 0; i < n; ++i) {
      if (Status sent = call.send_data(json{{"i", i}}); !sent) {
        record.stopped(sent);
        return sent;
      }
      ++record.count_sent;
    }
    return json{{"sent", n}};
  });

  methods.add("model.sleep", [&](rpc::CallContext& call) -> Result<json> {
    ++record.calls;
    {
      MutexLock lock(record.mutex);
      record.last_timeout_ms = timeout_ms_of(call);
      record.last_stop.clear();
    }
    if (call.wait_stopped(std::chrono::milliseconds(call.params().value("ms", 0LL)))) {
      record.stopped(call.stop_reason());
      return call.stop_reason();
    }
    return json{{"slept", true}};
  });

  methods.add("model.upload", [&](rpc::CallContext& call) -> Result<json> {
    long long bytes = 0, items = 0;
    rpc::InboundStream stream(call, {.window = 2, .credit_batch = 1});
    while (true) {
      auto incoming = stream.next_within(std::chrono::milliseconds(10'000));
      if (!incoming) return incoming.status();
      if (!*incoming) return Status(ErrorCode::deadline_exceeded, "no DATA for 10 s");
      ++items;
      for (const auto& attachment : (*incoming)->attachments) bytes += static_cast<long long>(attachment.size());
      if ((*incoming)->body.value("eof", false)) break;
    }
    return json{{"bytes", bytes}, {"items", items}};
  });

  methods.add("model.fail", [&](rpc::CallContext&) -> Result<json> {
    std::string paths;
    for (const auto& model : config["models"]) paths += " " + model["path"].get<std::string>();
    return Status(ErrorCode::not_found, "no such model; files:" + paths);
  });

  methods.add("model.crash", [](rpc::CallContext&) -> Result<json> { std::abort(); });

  methods.add("model.stats", [&](rpc::CallContext&) -> Result<json> {
    MutexLock lock(record.mutex);
    return json{{"count_sent", record.count_sent.load()}, {"last_stop", record.last_stop},
                {"last_timeout_ms", record.last_timeout_ms}, {"calls", record.calls.load()}};
  });

  rpc::ServerOptions options;
  options.endpoints = {endpoint};
  auto server = rpc::Server::start(std::move(options), methods);
  if (!server) {
    std::fprintf(stderr, "fake_modeld: %s\n", server.status().message().c_str());
    return 1;
  }
  int sig = 0;
  sigwait(&signals, &sig);
  return 0;
}
