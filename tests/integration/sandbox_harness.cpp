#include "tests/integration/sandbox_harness.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
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
  int ready_fd = -1;   // write end of the ready pipe, or -1
  int error_fd = -1;   // CLOEXEC: reports a failed set-up or exec as "stage errno"
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
  // The agent dies with the test process; a crashed test leaves no sandbox behind.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (setup.mount_proc) {
    // A private mount tree, then a /proc that shows the new PID namespace.
    if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) child_fail(setup, 1);
    if (::mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) != 0) child_fail(setup, 2);
  }
  if (!move_fd(setup.stdin_fd, 0) || !move_fd(setup.stdout_fd, 1) || !move_fd(setup.stderr_fd, 2)) {
    child_fail(setup, 3);
  }
  if (setup.ready_fd >= 0 && !move_fd(setup.ready_fd, kReadyFdInAgent)) child_fail(setup, 4);
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

int pidfd_open(pid_t pid) { return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)); }

}  // namespace

std::string agent_path() { return GPUBOX_AGENT_PATH; }

int shell_status(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return -1;
}

std::string make_temp_dir(const std::string& prefix) {
  std::string pattern = "/tmp/" + prefix + "-XXXXXX";
  if (!::mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp: " + std::string(std::strerror(errno)));
  return pattern;
}

std::unique_ptr<Sandbox> Sandbox::start(const SandboxOptions& options, std::string* error) {
  auto set_error = [&](const std::string& text) {
    if (error) *error = text;
    return nullptr;
  };
  std::unique_ptr<Sandbox> box(new Sandbox());
  box->dir_ = make_temp_dir("gpubox-it");

  std::vector<std::string> args = {agent_path()};
  if (options.pass_state_dir) {
    args.push_back("--state-dir");
    args.push_back(box->state_dir());
  }
  if (options.config) {
    write_file(box->path("config.json"), options.config->dump(2));
    args.push_back("--config");
    args.push_back(box->path("config.json"));
  }
  std::pair<Fd, Fd> ready_pipe;
  if (options.pass_ready_fd) {
    ready_pipe = make_pipe();
    args.push_back("--ready-fd");
    args.push_back(std::to_string(kReadyFdInAgent));
  }
  args.insert(args.end(), options.flags.begin(), options.flags.end());
  if (!options.command.empty()) {
    args.push_back("--");
    args.insert(args.end(), options.command.begin(), options.command.end());
  }

  // The test's environment, less an ambient GPUBOX_CONFIG, with the options'
  // env added or replacing what it names.
  auto name_of = [](std::string_view entry) { return entry.substr(0, entry.find('=')); };
  std::vector<std::string> env;
  for (char** entry = environ; entry && *entry; ++entry) {
    std::string_view name = name_of(*entry);
    bool replaced = name == "GPUBOX_CONFIG";
    for (const auto& own : options.env) replaced = replaced || name_of(own) == name;
    if (!replaced) env.emplace_back(*entry);
  }
  env.insert(env.end(), options.env.begin(), options.env.end());

  std::vector<char*> argv = c_strings(args);
  std::vector<char*> envp = c_strings(env);
  std::string path = agent_path();
  Fd stdin_fd = open_or_throw("/dev/null", O_RDONLY);
  Fd stdout_fd = open_or_throw(box->path("stdout"), O_WRONLY | O_CREAT | O_TRUNC);
  Fd stderr_fd = open_or_throw(box->path("stderr"), O_WRONLY | O_CREAT | O_TRUNC);
  auto [error_read, error_write] = make_pipe();

  ChildSetup setup;
  setup.path = path.c_str();
  setup.argv = argv.data();
  setup.envp = envp.data();
  setup.cwd = box->dir_.c_str();
  setup.stdin_fd = stdin_fd.get();
  setup.stdout_fd = stdout_fd.get();
  setup.stderr_fd = stderr_fd.get();
  setup.ready_fd = ready_pipe.second.get();
  setup.error_fd = error_write.get();
  setup.mount_proc = options.new_pid_namespace;

  void* stack = ::mmap(nullptr, kCloneStackSize, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
  if (stack == MAP_FAILED) return set_error("mmap: " + std::string(std::strerror(errno)));
  int flags = SIGCHLD | CLONE_VM | CLONE_VFORK;
  if (options.new_pid_namespace) flags |= CLONE_NEWPID | CLONE_NEWNS;
  box->started_at_ = Clock::now();
  pid_t pid = ::clone(child_main, static_cast<char*>(stack) + kCloneStackSize, flags, &setup);
  int clone_errno = errno;
  // CLONE_VFORK: the child has exec'd or exited by now, and no longer uses its stack.
  ::munmap(stack, kCloneStackSize);
  if (pid < 0) return set_error("clone: " + std::string(std::strerror(clone_errno)));
  box->pid_ = pid;
  box->pidfd_ = pidfd_open(pid);
  box->ready_fd_ = ready_pipe.first.release();
  // Only the agent holds the write ends now.
  ready_pipe.second.reset();
  error_write.reset();

  // EOF on the error pipe: the exec succeeded. Otherwise the child reports why.
  SetupFailure failure{};
  ssize_t n;
  do {
    n = ::read(error_read.get(), &failure, sizeof failure);
  } while (n < 0 && errno == EINTR);
  if (n == sizeof failure) {
    box->wait_exit(milliseconds(5000));
    return set_error("sandbox set-up failed at stage " + std::to_string(failure.stage) + ": " +
                     std::strerror(failure.error));
  }
  return box;
}

Sandbox::~Sandbox() {
  if (pid_ > 0 && !reaped_) {
    ::kill(pid_, SIGKILL);
    int status;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
  }
  if (pidfd_ >= 0) ::close(pidfd_);
  if (ready_fd_ >= 0) ::close(ready_fd_);
  std::error_code ignored;
  if (!dir_.empty()) std::filesystem::remove_all(dir_, ignored);
}

// Reads what the ready pipe has before the deadline into ready_buffer_.
// Returns the bytes read (> 0), 0 when the pipe closed, -1 at the deadline or on error.
ssize_t Sandbox::read_ready_pipe(Clock::time_point deadline) {
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

bool Sandbox::wait_ready(milliseconds timeout) {
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

bool Sandbox::wait_ready_fd_closed(milliseconds timeout) {
  if (ready_fd_ < 0) return true;
  auto deadline = Clock::now() + timeout;
  ssize_t n;
  while ((n = read_ready_pipe(deadline)) > 0) {
  }
  return n == 0;
}

bool Sandbox::signal(int sig) {
  if (reaped_ || pid_ <= 0) return false;
  return ::kill(pid_, sig) == 0;
}

bool Sandbox::running() {
  if (reaped_) return false;
  siginfo_t info{};
  // WNOWAIT: look, but leave the zombie for wait_exit to reap.
  if (::waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT) != 0) return false;
  return info.si_pid == 0;
}

std::optional<int> Sandbox::wait_exit(milliseconds timeout) {
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

std::string Sandbox::stdout_text() const { return read_file(path("stdout")); }
std::string Sandbox::stderr_text() const { return read_file(path("stderr")); }
std::string Sandbox::log_text() const { return read_file(state_dir() + "/agent.log"); }

std::vector<nlohmann::json> Sandbox::log_entries() const {
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

bool Sandbox::wait_for_log(const std::string& msg, milliseconds timeout, const std::string& child) const {
  return wait_until(
      [&] {
        for (const auto& entry : log_entries()) {
          if (entry.value("msg", "") == msg && (child.empty() || entry.value("child", "") == child)) return true;
        }
        return false;
      },
      timeout);
}

std::vector<ProcessInfo> list_processes() {
  std::vector<ProcessInfo> processes;
  DIR* proc = ::opendir("/proc");
  if (!proc) return processes;
  while (dirent* entry = ::readdir(proc)) {
    if (entry->d_name[0] < '0' || entry->d_name[0] > '9') continue;
    std::string stat = read_file(std::string("/proc/") + entry->d_name + "/stat");
    // "pid (comm) S ppid ...": comm may hold spaces and parentheses.
    size_t open = stat.find('(');
    size_t close = stat.rfind(')');
    if (open == std::string::npos || close == std::string::npos || close + 4 > stat.size()) continue;
    ProcessInfo info;
    info.pid = std::atoi(stat.c_str());
    info.comm = stat.substr(open + 1, close - open - 1);
    info.state = stat[close + 2];
    info.ppid = std::atoi(stat.c_str() + close + 4);
    processes.push_back(std::move(info));
  }
  ::closedir(proc);
  return processes;
}

std::vector<ProcessInfo> children_of(pid_t parent) {
  std::vector<ProcessInfo> children;
  for (auto& p : list_processes()) {
    if (p.ppid == parent) children.push_back(std::move(p));
  }
  return children;
}

int count_zombie_children(pid_t parent) {
  int zombies = 0;
  for (const auto& p : children_of(parent)) zombies += p.state == 'Z' ? 1 : 0;
  return zombies;
}

bool wait_until(const std::function<bool()>& cond, milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  while (true) {
    if (cond()) return true;
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(milliseconds(3));
  }
}

bool file_exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

void write_file(const std::string& path, const std::string& text, int mode) {
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    if (!out) throw std::runtime_error("cannot write " + path);
    out << text;
  }
  ::chmod(path.c_str(), static_cast<mode_t>(mode));
}

int count_lines(const std::string& text) {
  int lines = 0;
  for (char c : text) lines += c == '\n' ? 1 : 0;
  return lines;
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
