// The podman backend against the engine's own floor, from the same run:
//   - `gpubox create --backend podman` until it exits, which it does once the
//     agent answered a CURVE handshake through the published (relayed) port;
//   - `podman run --rm --entrypoint true IMAGE` (the image's entrypoint is the
//     agent, so `true` replaces it: the engine's start-and-exit floor);
// interleaved, RUNS each, p50 and p90; and the round trip of one call through
// the container's published port (tcp, CURVE) beside a local sandbox's ipc
// socket: sys.ping and proc.exec ["true"] on a connected C++ client, and
// `gpubox exec ID -- true` end to end. The image is image/Dockerfile on the
// Python stand-in base (tests/image/test_image.h). Needs root and podman.
// Target: create <= podman run ... true + 150 ms (p50).
//
// usage: gpubox_bench_container [RUNS]     (default 20)
#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "host/sandbox_keys.h"
#include "host/sandbox_store.h"
#include "rpc/client.h"
#include "tests/bench/percentile.h"
#include "tests/bench/run_program.h"
#include "tests/image/test_image.h"

#ifndef GPUBOX_CLI_PATH
#error "GPUBOX_CLI_PATH must name the gpubox binary"
#endif
#ifndef GPUBOX_AGENT_PATH
#error "GPUBOX_AGENT_PATH must name the gpubox-agent binary"
#endif

namespace {

using Clock = std::chrono::steady_clock;
using gpubox::bench::percentile;
using gpubox::bench::run_program;
constexpr int kWarmup = 2;


void check(bool ok, const std::string& what) {
  if (!ok) {
    std::fprintf(stderr, "bench: %s failed\n", what.c_str());
    std::exit(1);
  }
}

void reap() {
  while (::waitpid(-1, nullptr, WNOHANG) > 0) {
  }
}

// Round trips of one method on a connected client, in microseconds.
std::vector<double> round_trips(gpubox::rpc::Client& client, const std::string& method, const nlohmann::json& params, int count) {
  std::vector<double> us;
  for (int i = -kWarmup; i < count; ++i) {
    auto begin = Clock::now();
    check(client.call(method, params).is_ok(), method);
    if (i >= 0) us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - begin).count());
  }
  return us;
}

std::unique_ptr<gpubox::rpc::Client> connect(const gpubox::host::SandboxStore& store, const std::string& id) {
  auto record = store.resolve(id);
  check(record.is_ok(), "resolve " + id);
  auto options = gpubox::host::client_options_for(*record);
  check(options.is_ok(), "keys of " + id);
  auto client = gpubox::rpc::Client::connect(*options);
  check(client.is_ok(), "connect to " + id);
  return std::move(*client);
}

}  // namespace

int main(int argc, char** argv) {
  int runs = argc > 1 ? std::atoi(argv[1]) : 20;
  if (runs < 1) runs = 20;
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  const auto& problem = gpubox::testing::podman_problem();
  check(problem.empty(), problem);
  std::string built = gpubox::testing::build_test_image(gpubox::testing::kTestImagePython);
  check(built.empty(), "building the image: " + built);
  const std::string image = gpubox::testing::test_image_tag(gpubox::testing::kTestImagePython);
  char state[] = "/tmp/gpubox-bench-XXXXXX";
  check(::mkdtemp(state) != nullptr, "mkdtemp");
  ::setenv("XDG_STATE_HOME", state, 1);
  ::setenv("GPUBOX_AGENT", GPUBOX_AGENT_PATH, 1);
  const std::string cli = GPUBOX_CLI_PATH;

  std::vector<double> create_ms, floor_ms;
  for (int i = -kWarmup; i < runs; ++i) {
    double ms = 0;
    std::string created;
    check(run_program({cli, "create", "--backend", "podman", "--image", image}, &created, &ms) == 0, "gpubox create --backend podman");
    if (i >= 0) create_ms.push_back(ms);
    check(run_program({cli, "terminate", created.substr(0, 12)}) == 0, "gpubox terminate");
    check(run_program({"podman", "run", "--rm", "--entrypoint", "true", image}, nullptr, &ms) == 0, "podman run --rm IMAGE true");
    if (i >= 0) floor_ms.push_back(ms);
    reap();
  }

  std::string container_id, local_id;
  check(run_program({cli, "create", "--backend", "podman", "--image", image}, &container_id) == 0, "create (podman)");
  check(run_program({cli, "create"}, &local_id) == 0, "create (local)");
  container_id = container_id.substr(0, 12);
  local_id = local_id.substr(0, 12);
  gpubox::host::SandboxStore store(std::string(state) + "/gpubox");
  auto tcp = connect(store, container_id);
  auto ipc = connect(store, local_id);
  int calls = runs * 50;
  nlohmann::json exec_true = {{"argv", {"true"}}};
  auto ping_tcp = round_trips(*tcp, "sys.ping", nlohmann::json::object(), calls);
  auto ping_ipc = round_trips(*ipc, "sys.ping", nlohmann::json::object(), calls);
  auto exec_tcp = round_trips(*tcp, "proc.exec", exec_true, calls / 5);
  auto exec_ipc = round_trips(*ipc, "proc.exec", exec_true, calls / 5);
  std::vector<double> cli_tcp, cli_ipc;
  for (int i = -kWarmup; i < runs; ++i) {
    double ms = 0;
    check(run_program({cli, "exec", container_id, "--", "true"}, nullptr, &ms) == 0, "gpubox exec (podman)");
    if (i >= 0) cli_tcp.push_back(ms);
    check(run_program({cli, "exec", local_id, "--", "true"}, nullptr, &ms) == 0, "gpubox exec (local)");
    if (i >= 0) cli_ipc.push_back(ms);
  }
  tcp.reset();
  ipc.reset();
  check(run_program({cli, "terminate", "--all"}) == 0, "terminate --all");
  reap();
  std::filesystem::remove_all(state);

  double floor50 = percentile(floor_ms, 0.5), create50 = percentile(create_ms, 0.5);
  std::printf("podman backend, %d runs each (target: create <= podman run ... true + 150 ms, p50)\n\n", runs);
  std::printf("| %-52s | %9s | %9s |\n", "what", "p50", "p90");
  std::printf("|%s|%s|%s|\n", std::string(54, '-').c_str(), std::string(11, '-').c_str(), std::string(11, '-').c_str());
  auto row = [](const std::string& name, const std::vector<double>& samples, const char* unit) {
    std::printf("| %-52s | %6.1f %-2s | %6.1f %-2s |\n", name.c_str(), percentile(samples, 0.5), unit, percentile(samples, 0.9), unit);
  };
  row("podman run --rm --entrypoint true IMAGE", floor_ms, "ms");
  row("gpubox create --backend podman (until ready)", create_ms, "ms");
  std::printf("\ncreate - podman run true: %+.1f ms p50 (target <= +150 ms)\n\n", create50 - floor50);
  row("sys.ping, published port (tcp, CURVE, relay)", ping_tcp, "us");
  row("sys.ping, local sandbox (ipc)", ping_ipc, "us");
  row("proc.exec [true], published port", exec_tcp, "us");
  row("proc.exec [true], local sandbox (ipc)", exec_ipc, "us");
  row("gpubox exec ID -- true, podman sandbox", cli_tcp, "ms");
  row("gpubox exec ID -- true, local sandbox", cli_ipc, "ms");
  return 0;
}
