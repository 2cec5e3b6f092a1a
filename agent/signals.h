// The agent's signal policy. Signals are blocked in every thread (block in
// main() before any thread starts; threads inherit the mask) and read from a
// signalfd by the event-loop thread. Children get an empty mask and default
// dispositions (ProcessTable::spawn).
#pragma once

#include <string>

#include "base/fd.h"
#include "base/status.h"

namespace gpubox {

// What the agent does with a signal it receives.
enum class SignalAction {
  reap,      // SIGCHLD: reap every exited child
  shutdown,  // begin the graceful shutdown (a second one skips the grace)
  forward,   // send to the main child's process group, or else to every supervised child's group
  ignore,    // SIGPIPE and the like
};

// The one documented forwarding policy (docs/agent.md, "Signals"):
//   SIGTERM                      → shutdown
//   SIGINT                       → forward with a main child, shutdown without
//   SIGHUP SIGQUIT SIGUSR1 SIGUSR2 SIGWINCH SIGCONT → forward
//   SIGCHLD                      → reap
//   anything else in the set     → ignore
SignalAction signal_action(int sig, bool has_main_child);

// Blocks every signal but the synchronous ones (SEGV, BUS, FPE, ILL, TRAP,
// SYS, ABRT) in the calling thread.
void block_signals();

// A non-blocking signalfd for every signal the policy names, plus SIGPIPE.
Result<Fd> open_signal_fd();

// "SIGTERM"; "signal 42" for a number without a name.
std::string signal_name(int sig);

// Reads one pending signal from fd; 0 when none is pending.
int read_signal(int fd);

}  // namespace gpubox
