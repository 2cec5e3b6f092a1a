#include "agent/methods/process_runner.h"
#include "base/thread_annotations.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

namespace gpubox {

// Where the reaper (on the loop thread) leaves the exit status for the worker.
struct ProcessRunner::ExitBox {
  ExitBox() : fd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {}
  Mutex mutex;
  std::optional<ExitStatus> status GUARDED_BY(mutex);
  Fd fd;                              // raised once status is set
};

namespace {

Result<std::pair<Fd, Fd>> make_pipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return Status::from_errno(errno, "pipe2");
  return std::make_pair(Fd(fds[0]), Fd(fds[1]));
}

void set_nonblocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }

}  // namespace

ProcessLauncher::ExitCallback ProcessRunner::exit_into(std::shared_ptr<ExitBox> box) {
  return [box](pid_t, ExitStatus status) {
    {
      MutexLock lock(box->mutex);
      box->status = status;
    }
    std::uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(box->fd.get(), &one, sizeof one);
  };
}

Result<std::unique_ptr<ProcessRunner>> ProcessRunner::start(ProcessLauncher& launcher, SpawnOptions options,
                                                            std::optional<TerminalSize> tty) {
  auto box = std::make_shared<ExitBox>();
  if (!box->fd.valid()) return Status::from_errno(errno, "eventfd");
  if (tty) return start_on_pty(launcher, std::move(options), *tty, std::move(box));
  auto in = make_pipe();
  auto out = make_pipe();
  auto err = make_pipe();
  if (!in) return in.status();
  if (!out) return out.status();
  if (!err) return err.status();
  options.stdin_fd = in->first.get();
  options.stdout_fd = out->second.get();
  options.stderr_fd = err->second.get();
  auto started = std::chrono::steady_clock::now();
  auto pid = launcher.spawn(options, exit_into(box));
  if (!pid) return pid.status();
  set_nonblocking(in->second.get());
  set_nonblocking(out->first.get());
  set_nonblocking(err->first.get());
  return std::unique_ptr<ProcessRunner>(new ProcessRunner(launcher, *pid, std::move(in->second), std::move(out->first),
                                                          std::move(err->first), std::move(box), started, false));
}

Result<std::unique_ptr<ProcessRunner>> ProcessRunner::start_on_pty(ProcessLauncher& launcher, SpawnOptions options,
                                                                   TerminalSize size, std::shared_ptr<ExitBox> box) {
  Fd master(::posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC));
  if (!master.valid()) return Status::from_errno(errno, "cannot allocate a pseudo-terminal (posix_openpt)");
  char name[128];
  if (::grantpt(master.get()) != 0 || ::unlockpt(master.get()) != 0 || ::ptsname_r(master.get(), name, sizeof name) != 0) {
    return Status::from_errno(errno, "cannot set up the pseudo-terminal");
  }
  winsize window{size.rows, size.cols, 0, 0};
  ::ioctl(master.get(), TIOCSWINSZ, &window);
  // Held open until the child has its own: a master whose slave was never
  // opened, or closed by everyone, reads as end of file.
  Fd slave(::ioctl(master.get(), TIOCGPTPEER, O_RDWR | O_NOCTTY | O_CLOEXEC));
  if (!slave.valid()) return Status::from_errno(errno, "cannot open the pseudo-terminal " + std::string(name));
  Fd writer(::fcntl(master.get(), F_DUPFD_CLOEXEC, 0));
  if (!writer.valid()) return Status::from_errno(errno, "dup");
  options.new_session = true;
  options.controlling_tty = name;
  options.stdin_fd = options.stdout_fd = options.stderr_fd = -1;
  auto started = std::chrono::steady_clock::now();
  auto pid = launcher.spawn(options, exit_into(box));  // returns once the child has exec'ed
  if (!pid) return pid.status();
  slave.reset();
  set_nonblocking(master.get());
  return std::unique_ptr<ProcessRunner>(
      new ProcessRunner(launcher, *pid, std::move(writer), std::move(master), Fd(), std::move(box), started, true));
}

ProcessRunner::ProcessRunner(ProcessLauncher& launcher, pid_t pid, Fd stdin_w, Fd stdout_r, Fd stderr_r,
                             std::shared_ptr<ExitBox> box, std::chrono::steady_clock::time_point started, bool tty)
    : launcher_(launcher),
      pid_(pid),
      stdin_(std::move(stdin_w)),
      stdout_(std::move(stdout_r)),
      stderr_(std::move(stderr_r)),
      exit_(std::move(box)),
      started_(started),
      tty_(tty) {}

ProcessRunner::~ProcessRunner() {
  // A runner abandoned mid-run must not leave its process behind.
  signal(SIGKILL);
}

void ProcessRunner::write_stdin(std::string bytes) { stdin_pending_ += bytes; }

void ProcessRunner::close_stdin() { stdin_closing_ = true; }

bool ProcessRunner::signal(int sig) {
  MutexLock lock(exit_->mutex);
  if (exit_->status) return false;  // reaped: the pid may belong to someone else now
  return launcher_.signal_group(pid_, sig) || ::kill(pid_, sig) == 0;
}

Status ProcessRunner::resize(TerminalSize size) {
  if (!tty_) return Status(ErrorCode::invalid_request, "the process has no terminal to resize (start it with tty)");
  winsize window{size.rows, size.cols, 0, 0};
  if (::ioctl(stdout_.valid() ? stdout_.get() : stdin_.get(), TIOCSWINSZ, &window) != 0) {
    return Status::from_errno(errno, "cannot resize the terminal");
  }
  return Status::ok();
}

void ProcessRunner::pump_stdin() {
  while (stdin_.valid() && !stdin_pending_.empty()) {
    ssize_t n = ::write(stdin_.get(), stdin_pending_.data(), stdin_pending_.size());
    if (n > 0) {
      stdin_pending_.erase(0, static_cast<std::size_t>(n));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && errno == EAGAIN) {
      return;
    } else {
      stdin_.reset();  // EPIPE: the process closed its stdin
      stdin_pending_.clear();
    }
  }
  if (stdin_.valid() && stdin_closing_ && stdin_pending_.empty()) stdin_.reset();
}

Result<ProcessRunner::Outcome> ProcessRunner::run(const OutputCallback& on_output,
                                                  std::optional<std::chrono::steady_clock::time_point> deadline,
                                                  int stop_fd, int extra_fd, const std::function<Status()>& on_extra) {
  using Clock = std::chrono::steady_clock;
  Outcome outcome;
  Status failure;
  bool killed = false;
  std::optional<Clock::time_point> exited_at;
  // Output still open this long after the exit belongs to a grandchild that kept the pipe.
  constexpr auto kDrainAfterExit = std::chrono::seconds(1);
  std::vector<char> buffer(64 * 1024);

  auto kill_group = [&] {
    if (!killed) signal(SIGKILL);
    killed = true;
  };

  while (true) {
    bool has_exited;
    {
      MutexLock lock(exit_->mutex);
      has_exited = exit_->status.has_value();
    }
    if (has_exited && !exited_at) exited_at = Clock::now();
    bool output_open = stdout_.valid() || stderr_.valid();
    if (has_exited && (!output_open || Clock::now() - *exited_at >= kDrainAfterExit)) break;

    pump_stdin();
    std::vector<pollfd> fds;
    auto watch = [&](int fd, short events) {
      if (fd >= 0) fds.push_back({fd, events, 0});
    };
    watch(stdout_.get(), POLLIN);
    watch(stderr_.get(), POLLIN);
    if (stdin_.valid() && !stdin_pending_.empty()) watch(stdin_.get(), POLLOUT);
    watch(exit_->fd.get(), POLLIN);
    if (!killed) watch(stop_fd, POLLIN);
    if (!killed && !has_exited) watch(extra_fd, POLLIN);

    int timeout_ms = -1;
    auto consider = [&](Clock::time_point at) {
      auto ms = std::chrono::ceil<std::chrono::milliseconds>(at - Clock::now()).count();
      ms = std::max<long long>(0, ms);
      if (timeout_ms < 0 || ms < timeout_ms) timeout_ms = static_cast<int>(ms);
    };
    if (deadline && !killed) consider(*deadline);
    if (exited_at) consider(*exited_at + kDrainAfterExit);

    int ready = ::poll(fds.data(), fds.size(), timeout_ms);
    if (ready < 0 && errno != EINTR) return Status::from_errno(errno, "poll");

    if (deadline && !killed && Clock::now() >= *deadline) {
      outcome.timed_out = true;
      kill_group();
    }
    for (const auto& p : fds) {
      if (!p.revents) continue;
      if (p.fd == stop_fd) {
        kill_group();
      } else if (p.fd == extra_fd && on_extra) {
        if (Status status = on_extra(); !status) {
          failure = status;
          kill_group();
        }
      } else if (p.fd == exit_->fd.get()) {
        std::uint64_t value;
        [[maybe_unused]] auto n = ::read(p.fd, &value, sizeof value);
      } else if (p.fd == stdout_.get() || p.fd == stderr_.get()) {
        Fd& pipe = p.fd == stdout_.get() ? stdout_ : stderr_;
        Stream stream = p.fd == stdout_.get() ? Stream::stdout_stream : Stream::stderr_stream;
        ssize_t n = ::read(pipe.get(), buffer.data(), buffer.size());
        if (n > 0) {
          if (Status status = on_output(stream, std::string_view(buffer.data(), static_cast<std::size_t>(n)));
              !status) {
            failure = status;
            kill_group();
            pipe.reset();
          }
        } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
          pipe.reset();
        }
      }
    }
  }
  {
    MutexLock lock(exit_->mutex);
    outcome.status = exit_->status;
  }
  outcome.wall_s = std::chrono::duration<double>(Clock::now() - started_).count();
  if (!failure.is_ok()) return failure;
  return outcome;
}

}  // namespace gpubox
