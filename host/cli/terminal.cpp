#include "host/cli/terminal.h"

#include <sys/ioctl.h>
#include <unistd.h>

namespace gpubox::host::cli {

RawTerminal::RawTerminal(int fd) : fd_(fd) {
  termios current{};
  if (!::isatty(fd) || ::tcgetattr(fd, &current) != 0) return;
  saved_ = current;
  ::cfmakeraw(&current);
  ::tcsetattr(fd, TCSADRAIN, &current);
}

RawTerminal::~RawTerminal() {
  if (saved_) ::tcsetattr(fd_, TCSADRAIN, &*saved_);
}

std::optional<WindowSize> local_window_size() {
  for (int fd : {STDIN_FILENO, STDOUT_FILENO, STDERR_FILENO}) {
    winsize window{};
    if (::isatty(fd) && ::ioctl(fd, TIOCGWINSZ, &window) == 0 && window.ws_row > 0 && window.ws_col > 0) {
      return WindowSize{window.ws_row, window.ws_col};
    }
  }
  return std::nullopt;
}

}  // namespace gpubox::host::cli
