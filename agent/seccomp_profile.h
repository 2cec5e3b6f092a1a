// gpubox's syscall table: Docker's default seccomp profile (moby's
// profiles/seccomp v0.3.0, default.json) as it applies to the processes of
// a local sandbox, on the architecture this is built for. Docker's profile
// is an allowlist: what no rule allows fails (EPERM; ENOSYS past the newest
// call the table names, agent/seccomp_filter.cpp). Its rules conditioned on
// capabilities are taken for the sandbox's capability set (Docker's default
// set less CAP_MKNOD and CAP_NET_RAW, host/backends/local/capabilities.h):
// of those, only chroot's (CAP_SYS_CHROOT) applies. tests/unit/
// seccomp_profile_test.cpp compares this table with the real default.json.
// Pure data and functions of it; any thread.
#pragma once

#include <seccomp.h>

#include <string>
#include <vector>

namespace gpubox {

// One rule: calls named `name` get `action` when every one of `args` holds
// (several rules for one name: any of them).
struct SeccompRule {
  std::string name;
  uint32_t action = SCMP_ACT_ALLOW;  // SCMP_ACT_ALLOW or SCMP_ACT_ERRNO(n)
  std::vector<scmp_arg_cmp> args;
};

// The rules of the table. allow_namespaces (the local backend's --userns)
// takes from Docker's CAP_SYS_ADMIN rules their namespace calls only:
// unshare, setns, clone with any flags and clone3 (which then no longer
// gets ENOSYS); everything else CAP_SYS_ADMIN would add stays denied.
std::vector<SeccompRule> seccomp_profile_rules(bool allow_namespaces);

// The calls the namespace rules concern: clone, clone3, setns, unshare.
bool is_namespace_call(const std::string& name);

}  // namespace gpubox
