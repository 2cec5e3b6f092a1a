#include "host/program_run.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "base/fd.h"

extern char** environ;

namespace gpubox::host {
namespace {

using Clock = std::chrono::steady_clock;

std::string find_on_path(const std::string& program) {
  if (program.find('/') != std::string::npos) return ::access(program.c_str(), X_OK) == 0 ? program : "";
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "/usr/local/bin:/usr/bin:/bin");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    std::string candidate = (dir.empty() ? "." : dir) + "/" + program;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

}  // namespace

std::string ProgramRun::error_line() const {
  std::string text = err;
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ')) text.pop_back();
  auto newline = text.rfind('\n');
  std::string line = newline == std::string::npos ? text : text.substr(newline + 1);
  if (line.rfind("Error: ", 0) == 0) line = line.substr(7);
  if (line.rfind("Error response from daemon: ", 0) == 0) line = line.substr(28);
  return line.empty() ? "exit status " + std::to_string(status) : line;
}

bool program_on_path(const std::string& program) { return !find_on_path(program).empty(); }

namespace {

// posix_spawn of program (a path) with args and these file actions; the child
// starts with the default signal mask and dispositions, whatever the CLI blocked.
Result<pid_t> spawn(const std::string& program, const std::vector<std::string>& args,
                    const posix_spawn_file_actions_t* actions) {
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attributes, &none);
  posix_spawnattr_setsigdefault(&attributes, &all);
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  std::vector<std::string> argv_strings = {program};
  argv_strings.insert(argv_strings.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& arg : argv_strings) argv.push_back(arg.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  int spawned = ::posix_spawn(&pid, program.c_str(), actions, &attributes, argv.data(), environ);
  posix_spawnattr_destroy(&attributes);
  if (spawned != 0) return Status::from_errno(spawned, "cannot run " + program);
  return pid;
}

// The exit code of a waited-for child, or 128 + its signal.
int wait_for_exit(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

}  // namespace

Result<int> run_program_into_stdout(const std::string& name, const std::vector<std::string>& args) {
  std::string program = find_on_path(name);
  if (program.empty()) return Status(ErrorCode::invalid_request, "'" + name + "' was not found on PATH");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  std::fflush(stdout);
  auto spawned = spawn(program, args, &actions);
  posix_spawn_file_actions_destroy(&actions);
  if (!spawned) return spawned.status();
  return wait_for_exit(*spawned);
}

Result<ProgramRun> run_program(const std::string& name, const std::vector<std::string>& args,
                               std::chrono::milliseconds timeout, const std::string* input, int fd3) {
  std::string program = find_on_path(name);
  if (program.empty()) return Status(ErrorCode::invalid_request, "'" + name + "' was not found on PATH");
  Fd in_read;
  if (input) {
    // The whole input fits the pipe's buffer, so writing it before the child reads cannot block.
    int in_pipe[2];
    if (input->size() > 65536) return Status(ErrorCode::invalid_request, "the input for " + name + " exceeds 64 KiB");
    if (::pipe2(in_pipe, O_CLOEXEC) != 0) return Status::from_errno(errno, "pipe2");
    in_read = Fd(in_pipe[0]);
    Fd in_write(in_pipe[1]);
    if (write_fully(in_write.get(), input->data(), input->size()) != 0) return Status::from_errno(errno, "write");
  }
  int out_pipe[2], err_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0) return Status::from_errno(errno, "pipe2");
  Fd out_read(out_pipe[0]), out_write(out_pipe[1]);
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) return Status::from_errno(errno, "pipe2");
  Fd err_read(err_pipe[0]), err_write(err_pipe[1]);

  // fd3 duplicated above 3 first: dup2 onto itself would leave its close-on-exec flag set.
  Fd passed;
  if (fd3 >= 0) {
    passed = Fd(::fcntl(fd3, F_DUPFD_CLOEXEC, 10));
    if (!passed.valid()) return Status::from_errno(errno, "fcntl(F_DUPFD_CLOEXEC)");
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (input) {
    posix_spawn_file_actions_adddup2(&actions, in_read.get(), 0);
  } else {
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  }
  posix_spawn_file_actions_adddup2(&actions, out_write.get(), 1);
  posix_spawn_file_actions_adddup2(&actions, err_write.get(), 2);
  if (passed.valid()) posix_spawn_file_actions_adddup2(&actions, passed.get(), 3);
  auto spawned = spawn(program, args, &actions);
  posix_spawn_file_actions_destroy(&actions);
  if (!spawned) return spawned.status();
  const pid_t pid = *spawned;
  out_write.reset();
  err_write.reset();
  in_read.reset();

  ProgramRun run;
  auto deadline = Clock::now() + timeout;
  pollfd fds[2] = {{out_read.get(), POLLIN, 0}, {err_read.get(), POLLIN, 0}};
  int open = 2;
  bool timed_out = false;
  while (open > 0) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) {
      timed_out = true;
      ::kill(pid, SIGKILL);
      break;
    }
    int n = ::poll(fds, 2, static_cast<int>(left));
    if (n < 0 && errno != EINTR) break;
    for (int i = 0; i < 2 && n > 0; ++i) {
      if (fds[i].fd < 0 || !fds[i].revents) continue;
      char buffer[16384];
      ssize_t got = ::read(fds[i].fd, buffer, sizeof buffer);
      if (got > 0) {
        (i == 0 ? run.out : run.err).append(buffer, static_cast<size_t>(got));
      } else if (got == 0 || errno != EINTR) {
        fds[i].fd = -1;
        --open;
      }
    }
  }
  run.status = wait_for_exit(pid);
  if (timed_out) {
    return Status(ErrorCode::deadline_exceeded,
                  name + " " + (args.empty() ? "" : args[0]) + " did not finish within " +
                      std::to_string(timeout.count()) + " ms");
  }
  return run;
}

}  // namespace gpubox::host
