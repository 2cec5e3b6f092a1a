// The capabilities of a local sandbox's processes. User code keeps Docker's
// default set less CAP_MKNOD and CAP_NET_RAW (no device cgroup stops a made
// device node here, and raw sockets would reach the host's network under
// --network host): no module loading, raw I/O, clock, reboot, mount,
// ptrace, BPF or namespace administration. The agent (PID 1) also keeps
// CAP_SYS_ADMIN for the mounts it makes itself (hidden models); it gets it
// through the ambient set and clears that set at its start (see
// agent/privileges.h), so nothing it starts inherits it. no_new_privs holds
// for every process. confine_capabilities() runs in the cloned child just
// before it execs the agent. Any thread.
#pragma once

#include <string>
#include <vector>

namespace gpubox::host {

// What user code inside keeps (capability numbers).
const std::vector<int>& sandbox_capabilities();
// What only the agent holds beyond them.
const std::vector<int>& agent_only_capabilities();

// "CAP_CHOWN", ... ("CAP_42" for a number without a name here).
std::vector<std::string> capability_names(const std::vector<int>& capabilities);

// Sets no_new_privs, drops every other capability from the bounding set,
// and leaves the agent-only ones permitted, inheritable and ambient so that
// they survive the exec of the agent. False with errno on failure.
bool confine_capabilities();

}  // namespace gpubox::host
