// TerminalSession: runs the real `gpubox` CLI on a pseudo-terminal of its
// own (its stdin, stdout and stderr, and its controlling terminal), as a user's
// terminal emulator would, so that tests can type into it, read what it
// shows, resize the window and see the terminal's settings afterwards. One
// thread.
#pragma once

#include <sys/types.h>
#include <termios.h>

#include <chrono>
#include <string>
#include <vector>

#include "base/fd.h"

namespace gpubox::testing {

class TerminalSession {
 public:
  // Starts argv with envp on a new pty of rows × cols.
  TerminalSession(const std::vector<std::string>& argv, const std::vector<std::string>& envp, unsigned short rows,
                  unsigned short cols);
  ~TerminalSession();
  TerminalSession(const TerminalSession&) = delete;
  TerminalSession& operator=(const TerminalSession&) = delete;

  // Types bytes on the terminal.
  void type(const std::string& bytes);
  // Reads what the terminal shows until `text` has appeared after the last
  // match (true), or until the timeout (false).
  bool expect(const std::string& text, std::chrono::milliseconds timeout = std::chrono::seconds(20));
  // Everything the terminal showed so far.
  const std::string& screen() const { return screen_; }
  // Sets the window size (the kernel sends SIGWINCH to the CLI).
  void resize(unsigned short rows, unsigned short cols);
  // Waits for the CLI to exit (bounded): its exit code, or 128 + signal, or -1.
  int wait(std::chrono::milliseconds timeout = std::chrono::seconds(20));
  // The terminal's settings as the CLI left them.
  termios settings() const;

 private:
  void read_available(std::chrono::milliseconds wait);

  Fd master_;
  Fd slave_;  // kept open so the settings can still be read after the CLI exits
  pid_t pid_ = -1;
  std::string screen_;
  std::size_t matched_ = 0;
};

}  // namespace gpubox::testing
