// The cost of the seccomp filter the agent puts on every process it starts
// (agent/seccomp_filter.h), from one run, against no filter and against a
// one-instruction filter that allows everything (the floor any seccomp
// profile, Docker's included, pays on this kernel); each round runs all
// three, in rotating order.
//   exec:     spawn /bin/true through the agent's process table and reap it;
//   syscalls: a child that makes --calls system calls (getppid, fstat, a
//             1-byte read of /dev/zero, in turn), timed inside the child;
//   fork:     a child that forks and waits --forks times (clone is the call
//             the filter checks by its arguments).
// Prints the median of --rounds rounds of each, and gpubox's over the other two.
//
// usage: build/bin/gpubox_bench_seccomp [--rounds 15] [--spawns 200] [--calls 1000000] [--forks 2000]
#include <fcntl.h>
#include <linux/seccomp.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "agent/process_table.h"
#include "agent/seccomp_filter.h"
#include "tests/bench/percentile.h"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// Runs argv through table and returns its stdout once it has been reaped.
std::string run_child(gpubox::ProcessTable& table, const std::vector<std::string>& argv) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) std::abort();
  gpubox::SpawnOptions options;
  options.argv = argv;
  options.env = gpubox::build_environment({});
  options.stdout_fd = fds[1];
  bool exited = false;
  auto pid = table.spawn(options, [&](pid_t, gpubox::ExitStatus) { exited = true; });
  ::close(fds[1]);
  if (!pid) {
    std::fprintf(stderr, "spawn: %s\n", pid.status().to_string().c_str());
    std::exit(1);
  }
  std::string out;
  char buffer[256];
  for (ssize_t n; (n = ::read(fds[0], buffer, sizeof buffer)) > 0;) out.append(buffer, static_cast<size_t>(n));
  ::close(fds[0]);
  while (!exited) table.reap();
  return out;
}

// The child side of "syscalls": prints the seconds its loop took.
int syscall_loop(long calls) {
  int zero = ::open("/dev/zero", O_RDONLY | O_CLOEXEC);
  struct stat st {};
  char byte;
  auto start = Clock::now();
  for (long i = 0; i < calls; ++i) {
    switch (i % 3) {
      case 0: (void)::getppid(); break;
      case 1: (void)::fstat(zero, &st); break;
      default: (void)!::read(zero, &byte, 1); break;
    }
  }
  std::printf("%.9f\n", seconds_since(start));
  return 0;
}

// The child side of "fork".
int fork_loop(long forks) {
  auto start = Clock::now();
  for (long i = 0; i < forks; ++i) {
    pid_t pid = ::fork();
    if (pid == 0) ::_exit(0);
    ::waitpid(pid, nullptr, 0);
  }
  std::printf("%.9f\n", seconds_since(start));
  return 0;
}

long flag(int argc, char** argv, const char* name, long fallback) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], name) == 0) return std::atol(argv[i + 1]);
  }
  return fallback;
}

// Per variant (none, allow-all, gpubox's), one sample per round.
using Samples = std::vector<double>[3];

void report(const char* what, const char* unit, double scale, const Samples& samples) {
  double none = gpubox::bench::percentile(samples[0], 0.5) * scale;
  double floor = gpubox::bench::percentile(samples[1], 0.5) * scale;
  double ours = gpubox::bench::percentile(samples[2], 0.5) * scale;
  std::printf("%-8s %-3s %11.3f %11.3f %11.3f %13.3f %13.3f\n", what, unit, none, floor, ours, ours / none, ours / floor);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "--child-syscalls") == 0) return syscall_loop(std::atol(argv[2]));
  if (argc == 3 && std::strcmp(argv[1], "--child-forks") == 0) return fork_loop(std::atol(argv[2]));
  long rounds = flag(argc, argv, "--rounds", 15), spawns = flag(argc, argv, "--spawns", 200);
  long calls = flag(argc, argv, "--calls", 1000000), forks = flag(argc, argv, "--forks", 2000);

  // Three tables, each starting children from its spawn thread: no filter;
  // a one-instruction allow-all filter (what any seccomp filter costs on this
  // kernel: the syscall's slower entry path); gpubox's default filter.
  gpubox::ProcessTable tables[3];
  auto program = gpubox::build_seccomp_program({});
  if (!program) {
    std::fprintf(stderr, "%s\n", program.status().to_string().c_str());
    return 1;
  }
  gpubox::SeccompProgram allow_all{{BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)}};
  for (int i : {1, 2}) {
    if (gpubox::Status set = tables[i].set_child_filter(i == 1 ? allow_all : *program); !set) {
      std::fprintf(stderr, "%s\n", set.to_string().c_str());
      return 1;
    }
  }
  std::printf("filter: %zu BPF instructions, %zu calls denied\n", program->instructions.size(),
              gpubox::seccomp_denied_calls({}).size());
  std::string self = "/proc/self/exe";
  char resolved[4096];
  ssize_t n = ::readlink(self.c_str(), resolved, sizeof resolved - 1);
  if (n > 0) self.assign(resolved, static_cast<size_t>(n));

  Samples exec, syscalls, forking;
  for (long round = 0; round < rounds; ++round) {
    for (int k = 0; k < 3; ++k) {
      int variant = static_cast<int>((round + k) % 3);  // rotate the order
      gpubox::ProcessTable& table = tables[variant];
      auto start = Clock::now();
      for (long i = 0; i < spawns; ++i) run_child(table, {"/bin/true"});
      exec[variant].push_back(seconds_since(start) / static_cast<double>(spawns));
      double loop = std::stod(run_child(table, {self, "--child-syscalls", std::to_string(calls)}));
      syscalls[variant].push_back(loop / static_cast<double>(calls));
      double fork_time = std::stod(run_child(table, {self, "--child-forks", std::to_string(forks)}));
      forking[variant].push_back(fork_time / static_cast<double>(forks));
    }
  }
  std::printf("median of %ld rounds   unconfined   allow-all      gpubox  gpubox/unconf  gpubox/allow-all\n", rounds);
  report("exec", "us", 1e6, exec);
  report("syscall", "ns", 1e9, syscalls);
  report("fork", "us", 1e6, forking);
  return 0;
}
