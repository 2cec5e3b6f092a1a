#include "tests/rpc_fs/agent_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <thread>
#include <vector>

namespace gpubox::testing {

using Clock = std::chrono::steady_clock;

std::string agent_binary() { return GPUBOX_AGENT_PATH; }

std::unique_ptr<AgentProcess> AgentProcess::start(const std::string& state_dir, std::string* error) {
  std::string log_path = state_dir + ".agent.log";
  int ready[2];
  if (::pipe2(ready, O_CLOEXEC) != 0) {
    *error = std::string("pipe2: ") + std::strerror(errno);
    return nullptr;
  }
  std::string binary = agent_binary();
  std::string fd_text = std::to_string(ready[1]);
  std::vector<std::string> args = {binary, "--state-dir", state_dir, "--log-level", "warn", "--ready-fd", fd_text};
  std::vector<char*> argv;
  for (auto& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  pid_t pid = ::fork();
  if (pid < 0) {
    *error = std::string("fork: ") + std::strerror(errno);
    ::close(ready[0]);
    ::close(ready[1]);
    return nullptr;
  }
  if (pid == 0) {
    // Child: only async-signal-safe calls until exec.
    int log = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (log >= 0) {
      ::dup2(log, STDOUT_FILENO);
      ::dup2(log, STDERR_FILENO);
    }
    ::fcntl(ready[1], F_SETFD, 0);  // the agent inherits the write end
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  ::close(ready[1]);
  std::unique_ptr<AgentProcess> agent(new AgentProcess(pid, state_dir, log_path));
  std::string seen;
  auto give_up = Clock::now() + std::chrono::seconds(20);
  while (seen.find("ready\n") == std::string::npos) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(give_up - Clock::now()).count();
    pollfd item{ready[0], POLLIN, 0};
    if (left <= 0 || ::poll(&item, 1, static_cast<int>(left)) <= 0) {
      *error = "the agent did not report ready within 20 s; see " + log_path;
      break;
    }
    char buffer[64];
    ssize_t n = ::read(ready[0], buffer, sizeof buffer);
    if (n <= 0) {
      *error = "the agent closed its ready fd without \"ready\"; see " + log_path;
      break;
    }
    seen.append(buffer, static_cast<std::size_t>(n));
  }
  ::close(ready[0]);
  if (seen.find("ready\n") == std::string::npos) return nullptr;  // the destructor stops and reaps it
  return agent;
}

AgentProcess::~AgentProcess() {
  if (!reaped_) stop();
}

long AgentProcess::rss_kib() const {
  std::ifstream status("/proc/" + std::to_string(pid_) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  }
  return 0;
}

std::optional<int> AgentProcess::reap(std::chrono::milliseconds timeout) {
  int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid_, 0));
  auto give_up = Clock::now() + timeout;
  while (true) {
    int status = 0;
    pid_t done = ::waitpid(pid_, &status, WNOHANG);
    if (done == pid_ || (done < 0 && errno == ECHILD)) {
      if (pidfd >= 0) ::close(pidfd);
      reaped_ = true;
      return status;
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(give_up - Clock::now()).count();
    if (left <= 0) break;
    if (pidfd >= 0) {
      pollfd item{pidfd, POLLIN, 0};
      ::poll(&item, 1, static_cast<int>(left));
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  if (pidfd >= 0) ::close(pidfd);
  return std::nullopt;
}

std::optional<int> AgentProcess::stop(std::chrono::milliseconds timeout) {
  if (reaped_) return std::nullopt;
  ::kill(pid_, SIGTERM);
  if (auto status = reap(timeout)) return status;
  ::kill(pid_, SIGKILL);
  reap(std::chrono::seconds(10));
  return std::nullopt;
}

}  // namespace gpubox::testing
