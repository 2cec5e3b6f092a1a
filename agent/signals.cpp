#include "agent/signals.h"

#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace gpubox {
namespace {

constexpr int kHandled[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2,
                            SIGWINCH, SIGCONT, SIGCHLD, SIGPIPE, SIGALRM, SIGTTIN, SIGTTOU};

}  // namespace

SignalAction signal_action(int sig, bool has_main_child) {
  switch (sig) {
    case SIGCHLD: return SignalAction::reap;
    case SIGTERM: return SignalAction::shutdown;
    case SIGINT: return has_main_child ? SignalAction::forward : SignalAction::shutdown;
    case SIGHUP: case SIGQUIT: case SIGUSR1: case SIGUSR2: case SIGWINCH: case SIGCONT:
      return SignalAction::forward;
    default: return SignalAction::ignore;
  }
}

void block_signals() {
  sigset_t set;
  sigfillset(&set);
  for (int sync : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS, SIGABRT}) sigdelset(&set, sync);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

Result<Fd> open_signal_fd() {
  sigset_t set;
  sigemptyset(&set);
  for (int sig : kHandled) sigaddset(&set, sig);
  Fd fd(::signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC));
  if (!fd.valid()) return Status::from_errno(errno, "signalfd");
  return fd;
}

std::string signal_name(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

int read_signal(int fd) {
  signalfd_siginfo info;
  while (true) {
    ssize_t n = ::read(fd, &info, sizeof info);
    if (n == sizeof info) return static_cast<int>(info.ssi_signo);
    if (n < 0 && errno == EINTR) continue;
    return 0;
  }
}

}  // namespace gpubox
