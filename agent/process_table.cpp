#include "agent/process_table.h"

#include "agent/signals.h"
#include "base/thread_annotations.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

extern char** environ;

namespace gpubox {
namespace {

// posix_spawn attributes and file actions, released on every path.
class SpawnSetup {
 public:
  SpawnSetup() {
    posix_spawnattr_init(&attr_);
    posix_spawn_file_actions_init(&actions_);
  }
  ~SpawnSetup() {
    posix_spawnattr_destroy(&attr_);
    posix_spawn_file_actions_destroy(&actions_);
  }
  SpawnSetup(const SpawnSetup&) = delete;
  SpawnSetup& operator=(const SpawnSetup&) = delete;
  posix_spawnattr_t* attr() { return &attr_; }
  posix_spawn_file_actions_t* actions() { return &actions_; }

 private:
  posix_spawnattr_t attr_;
  posix_spawn_file_actions_t actions_;
};

std::vector<char*> c_strings(const std::vector<std::string>& strings) {
  std::vector<char*> pointers;
  pointers.reserve(strings.size() + 1);
  for (const auto& s : strings) pointers.push_back(const_cast<char*>(s.c_str()));
  pointers.push_back(nullptr);
  return pointers;
}

}  // namespace

ExitStatus ExitStatus::from_wait_status(int wait_status) {
  ExitStatus status;
  if (WIFEXITED(wait_status)) {
    status.code = WEXITSTATUS(wait_status);
  } else if (WIFSIGNALED(wait_status)) {
    status.signal = WTERMSIG(wait_status);
    status.core_dumped = WCOREDUMP(wait_status);
  }
  return status;
}

std::string ExitStatus::describe() const {
  if (signal == 0) return "exited with code " + std::to_string(code);
  std::string text = "killed by " + signal_name(signal);
  if (core_dumped) text += " (core dumped)";
  return text;
}

Result<pid_t> ProcessTable::spawn(const SpawnOptions& options, ExitCallback on_exit) {
  if (options.argv.empty() || options.argv[0].empty()) {
    return Status(ErrorCode::invalid_request, "spawn: argv is empty");
  }
  SpawnSetup setup;
  short flags = POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF;
  flags |= options.new_session ? POSIX_SPAWN_SETSID : POSIX_SPAWN_SETPGROUP;
  posix_spawnattr_setflags(setup.attr(), flags);
  posix_spawnattr_setpgroup(setup.attr(), 0);
  sigset_t empty, all;
  sigemptyset(&empty);
  sigfillset(&all);
  posix_spawnattr_setsigmask(setup.attr(), &empty);
  posix_spawnattr_setsigdefault(setup.attr(), &all);
  if (!options.controlling_tty.empty()) {
    if (!options.new_session) return Status(ErrorCode::invalid_request, "spawn: a controlling terminal needs a new session");
    // posix_spawn calls setsid() before the file actions: a session leader
    // opening a terminal without O_NOCTTY makes it its controlling terminal.
    posix_spawn_file_actions_addopen(setup.actions(), 0, options.controlling_tty.c_str(), O_RDWR, 0);
    posix_spawn_file_actions_adddup2(setup.actions(), 0, 1);
    posix_spawn_file_actions_adddup2(setup.actions(), 0, 2);
  }
  if (options.stdin_fd >= 0) posix_spawn_file_actions_adddup2(setup.actions(), options.stdin_fd, 0);
  if (options.stdout_fd >= 0) posix_spawn_file_actions_adddup2(setup.actions(), options.stdout_fd, 1);
  if (options.stderr_fd >= 0) posix_spawn_file_actions_adddup2(setup.actions(), options.stderr_fd, 2);
  for (const auto& [from, to] : options.extra_fds) posix_spawn_file_actions_adddup2(setup.actions(), from, to);
  if (!options.cwd.empty()) posix_spawn_file_actions_addchdir_np(setup.actions(), options.cwd.c_str());

  std::vector<char*> argv = c_strings(options.argv);
  std::vector<char*> envp = c_strings(options.env);
  pid_t pid = -1;
  MutexLock lock(mutex_);
  int err = 0;
  // On the spawn thread: the child inherits its filter, if it has one.
  spawn_thread().run([&] { err = posix_spawnp(&pid, argv[0], setup.actions(), setup.attr(), argv.data(), envp.data()); });
  if (err != 0) {
    std::string what = "cannot run '" + options.argv[0] + "'";
    if (!options.cwd.empty() && err == ENOENT && access(options.cwd.c_str(), X_OK) != 0) {
      what += " in '" + options.cwd + "'";
    }
    return Status::from_errno(err, what);
  }
  if (int adj = children_oom_score_adj_; adj != kInheritOomScore) {
    // Moments after the exec: the OOM killer prefers this child from now on.
    std::string path = "/proc/" + std::to_string(pid) + "/oom_score_adj";
    std::string value = std::to_string(adj);
    int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd >= 0) {
      [[maybe_unused]] auto n = ::write(fd, value.data(), value.size());
      ::close(fd);
    }
  }
  waiters_.emplace(pid, std::move(on_exit));
  no_children_ = false;
  return pid;
}

Status ProcessTable::set_child_filter(const SeccompProgram& filter) {
  auto thread = SpawnThread::start(&filter);
  if (!thread) return thread.status();
  spawn_thread_ = std::move(*thread);
  return Status::ok();
}

SpawnThread& ProcessTable::spawn_thread() {
  if (!spawn_thread_) {
    auto thread = SpawnThread::start(nullptr);  // without a filter there is nothing to refuse
    spawn_thread_ = std::move(*thread);
  }
  return *spawn_thread_;
}

bool ProcessTable::signal_group(pid_t pgid, int sig) { return pgid > 0 && ::kill(-pgid, sig) == 0; }

int ProcessTable::reap() {
  int reaped = 0;
  while (true) {
    ExitCallback callback;
    int wait_status = 0;
    struct rusage usage {};
    pid_t pid;
    {
      MutexLock lock(mutex_);
      pid = ::wait4(-1, &wait_status, WNOHANG, &usage);
      if (pid < 0 && errno == EINTR) continue;
      if (pid < 0) no_children_ = (errno == ECHILD);
      if (pid <= 0) return reaped;
      auto it = waiters_.find(pid);
      if (it != waiters_.end()) {
        callback = std::move(it->second);
        waiters_.erase(it);
      }
    }
    ++reaped;
    if (!callback) continue;
    ExitStatus status = ExitStatus::from_wait_status(wait_status);
    status.cpu_s = static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
                   static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
    callback(pid, status);
  }
}

bool ProcessTable::has_children() const {
  MutexLock lock(mutex_);
  return !no_children_;
}

std::vector<pid_t> ProcessTable::live_pids() const {
  MutexLock lock(mutex_);
  std::vector<pid_t> pids;
  for (const auto& [pid, callback] : waiters_) pids.push_back(pid);
  return pids;
}

std::vector<std::string> build_environment(const std::vector<std::pair<std::string, std::string>>& overrides,
                                           const std::vector<std::string>& remove) {
  auto name_of = [](std::string_view entry) { return entry.substr(0, entry.find('=')); };
  auto overridden = [&](std::string_view name) {
    for (const auto& r : remove) if (r == name) return true;
    for (const auto& [k, v] : overrides) if (k == name) return true;
    return false;
  };
  std::vector<std::string> env;
  for (char** entry = environ; entry && *entry; ++entry) {
    if (!overridden(name_of(*entry))) env.emplace_back(*entry);
  }
  // One entry per name, the last override winning: with duplicates, getenv()
  // would return the first, so a child's own env could not override common env.
  for (size_t i = 0; i < overrides.size(); ++i) {
    bool overridden_later = false;
    for (size_t j = i + 1; j < overrides.size(); ++j) overridden_later |= overrides[j].first == overrides[i].first;
    if (!overridden_later) env.push_back(overrides[i].first + "=" + overrides[i].second);
  }
  return env;
}

}  // namespace gpubox
