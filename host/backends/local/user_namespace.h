// --userns: a user namespace in which the sandbox's root is an unprivileged
// range of the host's ids (the subordinate range of /etc/subuid and
// /etc/subgid for root, else 100000-165535). make_user_namespace() runs in
// the CLI before the clone; the child idmaps its mounts through the fd and
// enters it with enter_user_namespace() just before it execs the agent. One
// thread; forks.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "base/fd.h"
#include "base/status.h"

namespace gpubox::host {

struct IdRange {
  std::uint32_t host_uid = 100000;  // what uid 0 inside is outside
  std::uint32_t host_gid = 100000;
  std::uint32_t count = 65536;
  // "0 100000 65536": as /proc/PID/uid_map says it.
  std::string uid_map() const;
  std::string gid_map() const;
};

// root's subordinate ranges from /etc/subuid and /etc/subgid (files named
// for tests), else the default.
IdRange subordinate_range(const std::string& subuid = "/etc/subuid", const std::string& subgid = "/etc/subgid");

// A new user namespace with range mapped (held open by the returned fd; the
// helper process that made it is gone).
Result<Fd> make_user_namespace(const IdRange& range);

// setns into the namespace, become its root (uid, gid 0; no groups) and
// move into a mount namespace of its own (a copy of the sandbox's). False
// with errno.
bool enter_user_namespace(int userns_fd);

// Gives the sandbox's root the ownership of path (a delegated cgroup
// directory and the files a delegatee writes, or the upper layer's root).
bool hand_over(const std::string& path, const IdRange& range);

}  // namespace gpubox::host
