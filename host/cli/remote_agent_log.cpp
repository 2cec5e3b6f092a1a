// `gpubox logs ID [-f]` for a sandbox whose agent log is not on this host (a control plane's):
// the log file read through the agent's own RPC (fs.read from an offset),
// polled while following.
#include <cstdio>
#include <thread>

#include "host/cli/cli.h"
#include "host/sandboxes/state.h"

namespace gpubox::host::cli {
namespace {

constexpr std::uint64_t kLogReadChunk = 1 << 20;  // fs.read answers up to 1 MiB in one RESULT
constexpr auto kPoll = std::chrono::milliseconds(200);
// A follower that cannot reach a running sandbox for this long gives up.
constexpr auto kUnreachableFor = std::chrono::seconds(30);

// Whether the sandbox's control plane says it ended.
bool ended_remotely(SandboxRecord& record) {
  auto store = SandboxStore::open_default();
  return store && refresh_sandbox_state(*store, &record) && sandbox_state(record) == "dead";
}

}  // namespace

int print_remote_agent_log(SandboxRecord& record, bool follow) {
  auto client = connect_sandbox(record);
  if (!client) return fail("logs", client.status(), kExitUnreachable);
  const std::string path = record.spec.value("state_dir", std::string(kSandboxStateDir)) + "/agent.log";
  rpc::CallOptions options;
  options.timeout_ms = 10'000;
  options.wait = std::chrono::milliseconds(4'000);  // a stopped agent answers nothing: notice it soon
  std::uint64_t offset = 0;
  auto unreachable_since = std::chrono::steady_clock::now();
  bool reachable = true;
  while (true) {
    auto read = (*client)->call("fs.read", {{"path", path}, {"offset", offset}, {"length", kLogReadChunk}}, options);
    if (!read) {
      if (!follow) return fail("logs", read.status().to_string(), kExitUnreachable);
      if (ended_remotely(record)) {
        // The agent writes its last lines ("agent exiting") after its RPC port closed: they are in the control plane's own log.
        std::fprintf(stderr, "gpubox logs: the sandbox ended; the agent's last lines are in its %s log\n", control_plane_of(record).c_str());
        return kExitOk;
      }
      if (reachable) unreachable_since = std::chrono::steady_clock::now();
      reachable = false;
      if (std::chrono::steady_clock::now() - unreachable_since > kUnreachableFor) {
        return fail("logs", "the agent stopped answering: " + read.status().to_string(), kExitUnreachable);
      }
      std::this_thread::sleep_for(kPoll);
      continue;
    }
    reachable = true;
    const auto& data = (*read)["data"];
    std::uint64_t size = 0;
    if (data.is_binary()) {
      size = data.get_binary().size();
      std::fwrite(data.get_binary().data(), 1, size, stdout);
    } else if (data.is_string()) {
      size = data.get_ref<const std::string&>().size();
      std::fwrite(data.get_ref<const std::string&>().data(), 1, size, stdout);
    }
    std::fflush(stdout);
    offset += size;
    if (size == kLogReadChunk) continue;  // more is there already
    if (!follow) return kExitOk;
    std::this_thread::sleep_for(kPoll);
  }
}

}  // namespace gpubox::host::cli
