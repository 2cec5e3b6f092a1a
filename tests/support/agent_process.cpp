#include "tests/support/agent_process.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string_view>
#include <thread>
#include <utility>

#include "base/fd.h"

extern char** environ;

#ifndef GPUBOX_AGENT_PATH
#error "GPUBOX_AGENT_PATH must name the gpubox-agent binary"
#endif

namespace gpubox::testing {
namespace {

// The ready fd number the agent is given. High, so that it never collides
// with the descriptors the child set-up dup2()s into 0, 1 and 2.
constexpr int kReadyFdInAgent = 100;
constexpr size_t kCloneStackSize = 256 * 1024;

// Everything the cloned child needs, prepared before the clone. The child
// shares the parent's memory (CLONE_VM | CLONE_VFORK, as posix_spawn does, so
// that no page tables are copied and the parent sleeps until the exec): it
// runs only raw system calls, allocates nothing, and is not instrumented by
// AddressSanitizer, whose shadow it would otherwise scribble on.
struct ChildSetup {
  const char* path = nullptr;
  char* const* argv = nullptr;
  char* const* envp = nullptr;
  const char* cwd = nullptr;
  int stdin_fd = -1;
  int stdout_fd = -1;
  int stderr_fd = -1;
  int ready_fd = -1;  // write end of the ready pipe
  int error_fd = -1;  // CLOEXEC: reports a failed set-up or exec as "stage errno"
  bool mount_proc = false;
};

struct SetupFailure {
  int stage;
  int error;
};

#define GPUBOX_CHILD_CODE __attribute__((no_sanitize("address")))

// dup2 that also clears close-on-exec when from and to are the same descriptor.
GPUBOX_CHILD_CODE bool move_fd(int from, int to) {
  if (from == to) return ::fcntl(to, F_SETFD, 0) == 0;
  return ::dup2(from, to) == to;
}

[[noreturn]] GPUBOX_CHILD_CODE void child_fail(const ChildSetup& setup, int stage) {
  SetupFailure failure{stage, errno};
  [[maybe_unused]] auto n = ::write(setup.error_fd, &failure, sizeof failure);
  ::_exit(127);
}

// Runs in the cloned child: async-signal-safe calls only.
GPUBOX_CHILD_CODE int child_main(void* arg) {
  const ChildSetup& setup = *static_cast<const ChildSetup*>(arg);
  // The agent dies with the test process; a crashed test leaves no agent behind.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (setup.mount_proc) {
    // A private mount tree, then a /proc that shows the new PID namespace.
    if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) child_fail(setup, 1);
    if (::mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) != 0) child_fail(setup, 2);
  }
  if (!move_fd(setup.stdin_fd, 0) || !move_fd(setup.stdout_fd, 1) || !move_fd(setup.stderr_fd, 2)) {
    child_fail(setup, 3);
  }
  if (!move_fd(setup.ready_fd, kReadyFdInAgent)) child_fail(setup, 4);
  // No core files from the signal tests.
  rlimit no_core{0, 0};
  ::setrlimit(RLIMIT_CORE, &no_core);
  if (::chdir(setup.cwd) != 0) child_fail(setup, 5);
  sigset_t empty;
  sigemptyset(&empty);
  ::sigprocmask(SIG_SETMASK, &empty, nullptr);
  ::execve(setup.path, setup.argv, setup.envp);
  child_fail(setup, 6);
}

Fd open_or_throw(const std::string& path, int flags) {
  int fd = ::open(path.c_str(), flags | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error("open " + path + ": " + std::strerror(errno));
  return Fd(fd);
}

// A close-on-exec pipe: {read end, write end}.
std::pair<Fd, Fd> make_pipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe2: " + std::string(std::strerror(errno)));
  return {Fd(fds[0]), Fd(fds[1])};
}

std::vector<char*> c_strings(std::vector<std::string>& strings) {
  std::vector<char*> pointers;
  for (auto& s : strings) pointers.push_back(s.data());
  pointers.push_back(nullptr);
  return pointers;
}

// The test's environment, less an ambient GPUBOX_CONFIG, with `own` added or replacing what it names.
std::vector<std::string> agent_environment(const std::vector<std::string>& own) {
  auto name_of = [](std::string_view entry) { return entry.substr(0, entry.find('=')); };
  std::vector<std::string> env;
  for (char** entry = environ; entry && *entry; ++entry) {
    std::string_view name = name_of(*entry);
    bool replaced = name == "GPUBOX_CONFIG";
    for (const auto& mine : own) replaced = replaced || name_of(mine) == name;
    if (!replaced) env.emplace_back(*entry);
  }
  env.insert(env.end(), own.begin(), own.end());
  return env;
}

// text with every `name` in it replaced by value.
std::string replace_all(std::string text, const std::string& name, const std::string& value) {
  for (size_t at = 0; (at = text.find(name, at)) != std::string::npos; at += value.size()) text.replace(at, name.size(), value);
  return text;
}

int pidfd_open(pid_t pid) { return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)); }

}  // namespace

std::string agent_path() { return GPUBOX_AGENT_PATH; }

int shell_status(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return -1;
}

std::unique_ptr<AgentProcess> AgentProcess::start(const AgentOptions& options, std::string* error) {
  auto set_error = [&](const std::string& text) {
    if (error) *error = text;
    return nullptr;
  };
  std::unique_ptr<AgentProcess> agent(new AgentProcess());
  agent->dir_ = make_temp_dir("gpubox-agent-test");
  agent->state_dir_ = options.state_dir.empty() ? agent->path("state") : options.state_dir;
  for (const auto& [name, content] : options.files) write_file(agent->path(name), content);

  std::vector<std::string> args = {agent_path(), "--state-dir", agent->state_dir_};
  if (options.config) {
    std::string text = replace_all(options.config->dump(2), "{dir}", agent->dir_);
    write_file(agent->path("config.json"), replace_all(text, "{state_dir}", agent->state_dir_));
    args.push_back("--config");
    args.push_back(agent->path("config.json"));
  }
  auto [ready_read, ready_write] = make_pipe();
  args.push_back("--ready-fd");
  args.push_back(std::to_string(kReadyFdInAgent));
  args.insert(args.end(), options.flags.begin(), options.flags.end());
  if (!options.command.empty()) {
    args.push_back("--");
    args.insert(args.end(), options.command.begin(), options.command.end());
  }
  std::vector<std::string> env = agent_environment(options.env);

  std::vector<char*> argv = c_strings(args);
  std::vector<char*> envp = c_strings(env);
  std::string path = agent_path();
  Fd stdin_fd = open_or_throw("/dev/null", O_RDONLY);
  Fd stdout_fd = open_or_throw(agent->path("stdout"), O_WRONLY | O_CREAT | O_TRUNC);
  Fd stderr_fd = open_or_throw(agent->path("stderr"), O_WRONLY | O_CREAT | O_TRUNC);
  auto [error_read, error_write] = make_pipe();

  ChildSetup setup;
  setup.path = path.c_str();
  setup.argv = argv.data();
  setup.envp = envp.data();
  setup.cwd = agent->dir_.c_str();
  setup.stdin_fd = stdin_fd.get();
  setup.stdout_fd = stdout_fd.get();
  setup.stderr_fd = stderr_fd.get();
  setup.ready_fd = ready_write.get();
  setup.error_fd = error_write.get();
  setup.mount_proc = options.new_pid_namespace;

  void* stack = ::mmap(nullptr, kCloneStackSize, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
  if (stack == MAP_FAILED) return set_error("mmap: " + std::string(std::strerror(errno)));
  int flags = SIGCHLD | CLONE_VM | CLONE_VFORK;
  if (options.new_pid_namespace) flags |= CLONE_NEWPID | CLONE_NEWNS;
  agent->started_at_ = Clock::now();
  pid_t pid = ::clone(child_main, static_cast<char*>(stack) + kCloneStackSize, flags, &setup);
  int clone_errno = errno;
  // CLONE_VFORK: the child has exec'd or exited by now, and no longer uses its stack.
  ::munmap(stack, kCloneStackSize);
  if (pid < 0) return set_error("clone: " + std::string(std::strerror(clone_errno)));
  agent->pid_ = pid;
  agent->pidfd_ = pidfd_open(pid);
  agent->ready_fd_ = ready_read.release();
  // Only the agent holds the write ends now.
  ready_write.reset();
  error_write.reset();

  // EOF on the error pipe: the exec succeeded. Otherwise the child reports why.
  SetupFailure failure{};
  ssize_t n;
  do {
    n = ::read(error_read.get(), &failure, sizeof failure);
  } while (n < 0 && errno == EINTR);
  if (n == sizeof failure) {
    agent->wait_exit(milliseconds(5000));
    return set_error("agent set-up failed at stage " + std::to_string(failure.stage) + ": " +
                     std::strerror(failure.error));
  }
  return agent;
}

std::unique_ptr<AgentProcess> AgentProcess::start_ready(const AgentOptions& options, std::string* error,
                                                        milliseconds timeout) {
  auto agent = start(options, error);
  if (agent && !agent->wait_ready(timeout)) {
    if (error) *error = "the agent did not become ready; stderr:\n" + agent->stderr_text() + "\nlog:\n" + agent->log_text();
    return nullptr;
  }
  return agent;
}

AgentProcess::~AgentProcess() {
  if (pid_ > 0 && !reaped_) {
    ::kill(pid_, SIGKILL);
    int status;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
  }
  if (pidfd_ >= 0) ::close(pidfd_);
  if (ready_fd_ >= 0) ::close(ready_fd_);
  std::error_code ignored;
  if (!dir_.empty() && !std::getenv("GPUBOX_KEEP_TEST_DIRS")) std::filesystem::remove_all(dir_, ignored);
}

ssize_t AgentProcess::read_ready_pipe(Clock::time_point deadline) {
  while (true) {
    auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count();
    if (left < 0) return -1;
    pollfd p{ready_fd_, POLLIN, 0};
    int r = ::poll(&p, 1, static_cast<int>(left));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return -1;
    char buffer[64];
    ssize_t n = ::read(ready_fd_, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n > 0) ready_buffer_.append(buffer, static_cast<size_t>(n));
    return n < 0 ? -1 : n;
  }
}

bool AgentProcess::wait_ready(milliseconds timeout) {
  if (ready_buffer_.find("ready\n") != std::string::npos) return true;
  if (ready_fd_ < 0) return false;
  auto deadline = Clock::now() + timeout;
  while (read_ready_pipe(deadline) > 0) {
    if (ready_buffer_.find("ready\n") != std::string::npos) {
      ready_at_ = Clock::now();
      return true;
    }
  }
  return false;  // the deadline passed, or the pipe closed without saying ready
}

bool AgentProcess::wait_ready_fd_closed(milliseconds timeout) {
  if (ready_fd_ < 0) return true;
  auto deadline = Clock::now() + timeout;
  ssize_t n;
  while ((n = read_ready_pipe(deadline)) > 0) {
  }
  return n == 0;
}

bool AgentProcess::signal(int sig) {
  if (reaped_ || pid_ <= 0) return false;
  return ::kill(pid_, sig) == 0;
}

bool AgentProcess::running() {
  if (reaped_) return false;
  siginfo_t info{};
  // WNOWAIT: look, but leave the zombie for wait_exit to reap.
  if (::waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT) != 0) return false;
  return info.si_pid == 0;
}

std::optional<int> AgentProcess::wait_exit(milliseconds timeout) {
  if (reaped_) return exit_status_;
  auto deadline = Clock::now() + timeout;
  while (true) {
    int status = 0;
    pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      exited_at_ = Clock::now();
      reaped_ = true;
      exit_status_ = shell_status(status);
      return exit_status_;
    }
    if (r < 0 && errno != EINTR) return std::nullopt;
    auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count();
    if (left < 0) return std::nullopt;
    if (pidfd_ >= 0) {
      pollfd p{pidfd_, POLLIN, 0};
      ::poll(&p, 1, static_cast<int>(std::max<long long>(left, 1)));
    } else {
      std::this_thread::sleep_for(milliseconds(2));
    }
  }
}

std::optional<int> AgentProcess::stop(milliseconds timeout) {
  if (reaped_) return exit_status_;
  signal(SIGTERM);
  if (auto status = wait_exit(timeout)) return status;
  signal(SIGKILL);
  wait_exit(milliseconds(10'000));
  return std::nullopt;
}

std::optional<long long> AgentProcess::rss_bytes() const {
  std::ifstream status("/proc/" + std::to_string(pid_) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  }
  return std::nullopt;
}

std::string AgentProcess::stdout_text() const { return read_file(path("stdout")); }
std::string AgentProcess::stderr_text() const { return read_file(path("stderr")); }
std::string AgentProcess::log_text() const { return read_file(state_dir_ + "/agent.log"); }

std::vector<nlohmann::json> AgentProcess::log_entries() const {
  std::vector<nlohmann::json> entries;
  std::string text = log_text();
  size_t begin = 0;
  while (true) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) break;  // a line still being written
    auto entry = nlohmann::json::parse(text.substr(begin, end - begin), nullptr, false);
    if (!entry.is_discarded()) entries.push_back(std::move(entry));
    begin = end + 1;
  }
  return entries;
}

bool AgentProcess::wait_for_log(const std::string& msg, milliseconds timeout, const std::string& child) const {
  return wait_until(
      [&] {
        for (const auto& entry : log_entries()) {
          if (entry.value("msg", "") == msg && (child.empty() || entry.value("child", "") == child)) return true;
        }
        return false;
      },
      timeout);
}

long long parse_log_timestamp_us(const std::string& ts) {
  std::tm tm{};
  int year, month, day, hour, minute, second;
  long long micros = 0;
  if (std::sscanf(ts.c_str(), "%d-%d-%dT%d:%d:%d.%lldZ", &year, &month, &day, &hour, &minute, &second, &micros) != 7) {
    return -1;
  }
  tm.tm_year = year - 1900;
  tm.tm_mon = month - 1;
  tm.tm_mday = day;
  tm.tm_hour = hour;
  tm.tm_min = minute;
  tm.tm_sec = second;
  return static_cast<long long>(::timegm(&tm)) * 1'000'000 + micros;
}

}  // namespace gpubox::testing
