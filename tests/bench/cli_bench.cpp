// The `gpubox` CLI end to end against the floor of a PID namespace:
// `unshare --fork --pid true`, from the same run. Times, p50 and p90 over RUNS
// each (interleaved, so that machine noise lands on all alike):
//   - `gpubox create` until it exits, which it does once the agent wrote
//     "ready" (namespaces, cgroups, mounts, agent start, ready);
//   - `gpubox exec ID -- true` (CLI start, connect, proc.spawn, exit code);
//   - `unshare --fork --pid true`.
// Each created sandbox is terminated (untimed) before the next. State goes to
// a temporary XDG_STATE_HOME. Needs root.
//
// usage: gpubox_bench_cli [RUNS]     (default 50)
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

#include "tests/bench/percentile.h"
#include "tests/bench/run_program.h"

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
constexpr int kWarmup = 3;


void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "bench: %s failed\n", what);
    std::exit(1);
  }
}

}  // namespace

int main(int argc, char** argv) {
  int runs = argc > 1 ? std::atoi(argv[1]) : 50;
  if (runs < 1) runs = 50;
  // Detached agents are reparented here when the CLI exits: reap them.
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  char state[] = "/tmp/gpubox-bench-XXXXXX";
  check(::mkdtemp(state) != nullptr, "mkdtemp");
  ::setenv("XDG_STATE_HOME", state, 1);
  ::setenv("GPUBOX_AGENT", GPUBOX_AGENT_PATH, 1);
  const std::string cli = GPUBOX_CLI_PATH;
  const std::string unshare = "/usr/bin/unshare";

  std::string id;
  check(run_program({cli, "create", "--name", "bench-exec"}, &id) == 0, "create");
  id = id.substr(0, 12);

  std::vector<double> create_ms, exec_ms, unshare_ms;
  for (int i = -kWarmup; i < runs; ++i) {
    double ms = 0;
    std::string created;
    check(run_program({cli, "create"}, &created, &ms) == 0, "gpubox create");
    if (i >= 0) create_ms.push_back(ms);
    check(run_program({cli, "terminate", created.substr(0, 12)}) == 0, "gpubox terminate");
    check(run_program({cli, "exec", id, "--", "true"}, nullptr, &ms) == 0, "gpubox exec -- true");
    if (i >= 0) exec_ms.push_back(ms);
    check(run_program({unshare, "--fork", "--pid", "true"}, nullptr, &ms) == 0, "unshare --fork --pid true");
    if (i >= 0) unshare_ms.push_back(ms);
    while (::waitpid(-1, nullptr, WNOHANG) > 0) {
    }
  }
  check(run_program({cli, "terminate", "--all"}) == 0, "terminate --all");
  while (::waitpid(-1, nullptr, WNOHANG) > 0) {
  }
  std::filesystem::remove_all(state);

  double floor50 = percentile(unshare_ms, 0.5);
  std::printf("gpubox CLI end to end, %d runs each (local backend; targets: create <= 50 ms p50, exec <= 10 ms p50)\n\n",
              runs);
  std::printf("| %-36s | %8s | %8s | %12s |\n", "what", "p50 ms", "p90 ms", "p50/unshare");
  std::printf("|%s|%s|%s|%s|\n", std::string(38, '-').c_str(), std::string(10, '-').c_str(),
              std::string(10, '-').c_str(), std::string(14, '-').c_str());
  auto row = [&](const char* name, const std::vector<double>& ms) {
    std::printf("| %-36s | %8.3f | %8.3f | %11.1fx |\n", name, percentile(ms, 0.5), percentile(ms, 0.9),
                percentile(ms, 0.5) / floor50);
  };
  row("unshare --fork --pid true", unshare_ms);
  row("gpubox create (until ready)", create_ms);
  row("gpubox exec ID -- true", exec_ms);
  return 0;
}
