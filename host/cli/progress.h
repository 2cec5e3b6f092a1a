// Progress: a one-line progress bar on stderr for long transfers (put, get,
// result), drawn only when stderr is a terminal and the total is at least
// min_total bytes. The label (a file or model name) is escaped for the
// terminal. One thread.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "base/terminal_text.h"

namespace gpubox::host::cli {

class Progress {
 public:
  static constexpr std::uint64_t kDefaultMin = 8 << 20;  // smaller transfers show no bar

  Progress(std::uint64_t total, std::string label, std::uint64_t min_total = kDefaultMin)
      : total_(total), label_(escape_for_terminal(label)), on_(total >= min_total && ::isatty(STDERR_FILENO)) {}
  ~Progress() {
    if (on_ && drawn_) std::fputc('\n', stderr);
  }
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void add(std::uint64_t bytes) { set(done_ + bytes); }
  // The bytes done so far, of a total that may be learnt late (0: unknown yet).
  void set(std::uint64_t done, std::uint64_t total = 0) {
    done_ = done;
    if (total) total_ = total;
    if (!on_) return;
    int percent = total_ ? static_cast<int>(done_ * 100 / total_) : 100;
    if (percent > 100) percent = 100;
    if (percent == last_percent_) return;
    last_percent_ = percent;
    drawn_ = true;
    int filled = percent * 30 / 100;
    std::fprintf(stderr, "\r%s [%s%s] %3d%% %.1f/%.1f MiB", label_.c_str(),
                 std::string(static_cast<size_t>(filled), '#').c_str(),
                 std::string(static_cast<size_t>(30 - filled), ' ').c_str(), percent,
                 static_cast<double>(done_) / 1048576.0, static_cast<double>(total_) / 1048576.0);
    std::fflush(stderr);
  }

 private:
  std::uint64_t total_;
  std::uint64_t done_ = 0;
  std::string label_;
  bool on_;
  bool drawn_ = false;
  int last_percent_ = -1;
};

}  // namespace gpubox::host::cli
