// Identifies a process across time by its pid and its start time (field 22 of
// /proc/PID/stat, in clock ticks since boot), so that a reused pid is never
// mistaken for the process it once named. Reads /proc only; any thread.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>

namespace gpubox::host {

struct ProcessIdentity {
  pid_t pid = 0;
  std::uint64_t start_time = 0;
};

// The start time of pid, or nullopt when no such process exists.
std::optional<std::uint64_t> process_start_time(pid_t pid);

// True when the process still runs: it exists, it is the same process (same
// start time), and it has not exited (a zombie, state Z or X, has).
bool process_alive(const ProcessIdentity& process);

}  // namespace gpubox::host
