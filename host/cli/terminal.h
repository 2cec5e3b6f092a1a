// The local terminal for `gpubox exec -t`: raw mode while a remote pty is in
// use, and the window size to pass on. One thread.
#pragma once

#include <termios.h>

#include <optional>

namespace gpubox::host::cli {

// Holds a terminal in raw mode (no echo, no line editing, no signals from
// keys: Ctrl-C and Ctrl-D travel as bytes) and restores its settings when
// destroyed, on every way out of the scope that owns it.
class RawTerminal {
 public:
  // Raw mode on fd; a RawTerminal that does nothing when fd is not a terminal.
  explicit RawTerminal(int fd);
  ~RawTerminal();
  RawTerminal(const RawTerminal&) = delete;
  RawTerminal& operator=(const RawTerminal&) = delete;

 private:
  int fd_;
  std::optional<termios> saved_;
};

struct WindowSize {
  unsigned short rows = 24;
  unsigned short cols = 80;
};

// The window size of the first of stdin, stdout, stderr that is a terminal.
std::optional<WindowSize> local_window_size();

}  // namespace gpubox::host::cli
