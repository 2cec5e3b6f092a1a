// The syscall filter the agent installs in every process it starts
// (docs/security.md, "Seccomp"): Docker's default profile, an allowlist
// (agent/seccomp_profile.h), compiled with libseccomp for x86-64, i386 and
// x32. A call no rule allows fails with EPERM; one numbered past the newest
// call the table names fails with ENOSYS, as under Docker, so that libc
// falls back from calls newer than the profile (clone3 gets ENOSYS too,
// so that libc uses clone, whose flags the filter sees). The agent itself
// stays unfiltered (it mounts models while it runs): one thread of it holds
// the filter and starts the children (agent/spawn_thread.h).
#pragma once

#include <linux/filter.h>

#include <string>
#include <vector>

#include "base/status.h"

namespace gpubox {

struct SeccompSettings {
  bool enabled = true;            // false: "unconfined", no filter
  bool allow_namespaces = false;  // clone/unshare/setns of namespaces allowed (--userns)
};

// A compiled filter, ready for seccomp(SECCOMP_SET_MODE_FILTER) in a child.
struct SeccompProgram {
  std::vector<sock_filter> instructions;
  // Valid while this program lives and is not changed.
  sock_fprog view() const {
    return {static_cast<unsigned short>(instructions.size()), const_cast<sock_filter*>(instructions.data())};
  }
};

// The calls of the native ABI the filter refuses (sys.info's seccomp.denied):
// their names, those allowed only with some arguments marked so, and the
// number past which every call gets ENOSYS.
std::vector<std::string> seccomp_denied_calls(const SeccompSettings& settings);

Result<SeccompProgram> build_seccomp_program(const SeccompSettings& settings);

// Installs program in the calling thread (and so in every process it
// starts from now on). Without CAP_SYS_ADMIN it sets the thread's
// no_new_privs first, as the kernel requires. Returns 0 or an errno value.
int install_seccomp_program(const sock_fprog* program);

}  // namespace gpubox
