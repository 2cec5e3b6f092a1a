#include "tests/cli/terminal_session.h"

#include <fcntl.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <stdexcept>
#include <thread>

namespace gpubox::testing {

TerminalSession::TerminalSession(const std::vector<std::string>& argv, const std::vector<std::string>& envp,
                                 unsigned short rows, unsigned short cols) {
  int master = -1, slave = -1;
  winsize window{rows, cols, 0, 0};
  if (::openpty(&master, &slave, nullptr, nullptr, &window) != 0) throw std::runtime_error("openpty failed");
  master_.reset(master);
  slave_.reset(slave);
  ::fcntl(master, F_SETFD, FD_CLOEXEC);
  ::fcntl(slave, F_SETFD, FD_CLOEXEC);
  std::vector<char*> args, env;
  for (const auto& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);
  for (const auto& var : envp) env.push_back(const_cast<char*>(var.c_str()));
  env.push_back(nullptr);
  pid_ = ::fork();
  if (pid_ == 0) {
    ::setsid();
    ::ioctl(slave, TIOCSCTTY, 0);
    ::dup2(slave, 0);
    ::dup2(slave, 1);
    ::dup2(slave, 2);
    ::execve(args[0], args.data(), env.data());
    ::_exit(127);
  }
}

TerminalSession::~TerminalSession() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
}

void TerminalSession::type(const std::string& bytes) { (void)write_fully(master_.get(), bytes.data(), bytes.size()); }

void TerminalSession::read_available(std::chrono::milliseconds wait) {
  pollfd fd{master_.get(), POLLIN, 0};
  if (::poll(&fd, 1, static_cast<int>(wait.count())) <= 0) return;
  char buffer[4096];
  ssize_t n = ::read(master_.get(), buffer, sizeof buffer);
  if (n > 0) screen_.append(buffer, static_cast<std::size_t>(n));
  if (n <= 0) std::this_thread::sleep_for(wait);  // EIO: nothing holds the terminal now
}

bool TerminalSession::expect(const std::string& text, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    if (auto at = screen_.find(text, matched_); at != std::string::npos) {
      matched_ = at + text.size();
      return true;
    }
    if (std::chrono::steady_clock::now() >= deadline) return false;
    read_available(std::chrono::milliseconds(50));
  }
}

void TerminalSession::resize(unsigned short rows, unsigned short cols) {
  winsize window{rows, cols, 0, 0};
  ::ioctl(master_.get(), TIOCSWINSZ, &window);
}

int TerminalSession::wait(std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (pid_ > 0) {
    int status = 0;
    pid_t done = ::waitpid(pid_, &status, WNOHANG);
    if (done == pid_) {
      pid_ = -1;
      read_available(std::chrono::milliseconds(0));
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    if (std::chrono::steady_clock::now() >= deadline) return -1;
    read_available(std::chrono::milliseconds(50));  // keep the terminal drained so the CLI never blocks on it
  }
  return -1;
}

termios TerminalSession::settings() const {
  termios current{};
  ::tcgetattr(slave_.get(), &current);
  return current;
}

}  // namespace gpubox::testing
