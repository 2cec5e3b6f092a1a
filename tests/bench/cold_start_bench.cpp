// Cold start of gpubox-agent against the floor every process pays:
// fork+exec+wait of /bin/true, from the same run. The agent's figure is the
// time from just before its clone until "ready\n" is read from --ready-fd;
// each agent is then SIGTERMed and reaped. Also the idle agent's RSS after
// 1 s. Both as a plain child (a subreaper) and as PID 1 of a new PID namespace
// (needs root).
//
// usage: gpubox_bench_cold_start [RUNS]     (default 50)
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "tests/bench/percentile.h"
#include "tests/support/agent_process.h"

namespace {

using gpubox::testing::AgentOptions;
using gpubox::testing::AgentProcess;
using gpubox::testing::Clock;
using std::chrono::milliseconds;

constexpr int kWarmup = 3;

double ms_between(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double, std::milli>(to - from).count();
}

using gpubox::bench::percentile;

double fork_exec_wait_true() {
  auto begin = Clock::now();
  pid_t pid = ::fork();
  if (pid == 0) {
    char* const argv[] = {const_cast<char*>("/bin/true"), nullptr};
    ::execv("/bin/true", argv);
    ::_exit(127);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
  }
  auto end = Clock::now();
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::fprintf(stderr, "/bin/true failed\n");
    std::exit(1);
  }
  return ms_between(begin, end);
}

std::unique_ptr<AgentProcess> start_agent(bool new_pid_namespace) {
  AgentOptions options;
  options.new_pid_namespace = new_pid_namespace;
  options.flags = {"--log-level", "info"};
  std::string error;
  auto box = AgentProcess::start(options, &error);
  if (!box || !box->wait_ready(milliseconds(10'000))) {
    std::fprintf(stderr, "agent did not start: %s %s\n", error.c_str(), box ? box->stderr_text().c_str() : "");
    std::exit(1);
  }
  return box;
}

void stop_agent(AgentProcess& box) {
  box.signal(SIGTERM);
  auto status = box.wait_exit(milliseconds(10'000));
  if (status != 0) {
    std::fprintf(stderr, "agent did not exit cleanly (status %d)\n", status ? *status : -1);
    std::exit(1);
  }
}

double agent_cold_start(bool new_pid_namespace) {
  auto box = start_agent(new_pid_namespace);
  double ms = ms_between(box->started_at(), box->ready_at());
  stop_agent(*box);
  return ms;
}

long idle_rss_kib(bool new_pid_namespace) {
  auto box = start_agent(new_pid_namespace);
  std::this_thread::sleep_for(std::chrono::seconds(1));
  long kib = static_cast<long>(box->rss_bytes().value_or(-1024) / 1024);
  stop_agent(*box);
  return kib;
}

}  // namespace

int main(int argc, char** argv) {
  int runs = argc > 1 ? std::atoi(argv[1]) : 50;
  if (runs < 1) runs = 50;
  std::vector<double> true_ms, agent_ms, pid1_ms;
  for (int i = 0; i < kWarmup; ++i) {
    fork_exec_wait_true();
    agent_cold_start(false);
    agent_cold_start(true);
  }
  // Interleaved, so that a burst of machine noise lands on all three alike.
  for (int i = 0; i < runs; ++i) {
    true_ms.push_back(fork_exec_wait_true());
    agent_ms.push_back(agent_cold_start(false));
    pid1_ms.push_back(agent_cold_start(true));
  }
  long rss = idle_rss_kib(false);
  long rss_pid1 = idle_rss_kib(true);

  double true50 = percentile(true_ms, 0.5), true90 = percentile(true_ms, 0.9);
  auto row = [&](const char* name, const std::vector<double>& ms, long rss_kib) {
    double p50 = percentile(ms, 0.5), p90 = percentile(ms, 0.9);
    std::printf("| %-36s | %8.3f | %8.3f | %7.1fx | %7.1fx | %9ld |\n", name, p50, p90, p50 / true50, p90 / true90,
                rss_kib);
  };
  std::printf("cold start, %d runs each (agent: clone/exec until \"ready\" is read; then SIGTERM and wait)\n\n", runs);
  std::printf("| %-36s | %8s | %8s | %8s | %8s | %9s |\n", "what", "p50 ms", "p90 ms", "p50/true", "p90/true",
              "RSS KiB");
  std::printf("|%s|%s|%s|%s|%s|%s|\n", std::string(38, '-').c_str(), std::string(10, '-').c_str(),
              std::string(10, '-').c_str(), std::string(10, '-').c_str(), std::string(10, '-').c_str(),
              std::string(11, '-').c_str());
  std::printf("| %-36s | %8.3f | %8.3f | %7.1fx | %7.1fx | %9s |\n", "/bin/true fork+exec+wait", true50, true90, 1.0,
              1.0, "-");
  row("gpubox-agent (subreaper)", agent_ms, rss);
  row("gpubox-agent (PID 1, new PID ns)", pid1_ms, rss_pid1);
  std::printf("\nRSS: VmRSS of an idle agent (no children), 1 s after ready.\n");
  return 0;
}
