#include "host/backends/local/capabilities.h"

#include <linux/capability.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>

namespace gpubox::host {
namespace {

struct Named {
  int number;
  const char* name;
};

constexpr Named kNames[] = {
    {CAP_CHOWN, "CAP_CHOWN"}, {CAP_DAC_OVERRIDE, "CAP_DAC_OVERRIDE"}, {CAP_DAC_READ_SEARCH, "CAP_DAC_READ_SEARCH"},
    {CAP_FOWNER, "CAP_FOWNER"}, {CAP_FSETID, "CAP_FSETID"}, {CAP_KILL, "CAP_KILL"}, {CAP_SETGID, "CAP_SETGID"},
    {CAP_SETUID, "CAP_SETUID"}, {CAP_SETPCAP, "CAP_SETPCAP"}, {CAP_LINUX_IMMUTABLE, "CAP_LINUX_IMMUTABLE"},
    {CAP_NET_BIND_SERVICE, "CAP_NET_BIND_SERVICE"}, {CAP_NET_BROADCAST, "CAP_NET_BROADCAST"},
    {CAP_NET_ADMIN, "CAP_NET_ADMIN"}, {CAP_NET_RAW, "CAP_NET_RAW"}, {CAP_IPC_LOCK, "CAP_IPC_LOCK"},
    {CAP_IPC_OWNER, "CAP_IPC_OWNER"}, {CAP_SYS_MODULE, "CAP_SYS_MODULE"}, {CAP_SYS_RAWIO, "CAP_SYS_RAWIO"},
    {CAP_SYS_CHROOT, "CAP_SYS_CHROOT"}, {CAP_SYS_PTRACE, "CAP_SYS_PTRACE"}, {CAP_SYS_PACCT, "CAP_SYS_PACCT"},
    {CAP_SYS_ADMIN, "CAP_SYS_ADMIN"}, {CAP_SYS_BOOT, "CAP_SYS_BOOT"}, {CAP_SYS_NICE, "CAP_SYS_NICE"},
    {CAP_SYS_RESOURCE, "CAP_SYS_RESOURCE"}, {CAP_SYS_TIME, "CAP_SYS_TIME"}, {CAP_SYS_TTY_CONFIG, "CAP_SYS_TTY_CONFIG"},
    {CAP_MKNOD, "CAP_MKNOD"}, {CAP_LEASE, "CAP_LEASE"}, {CAP_AUDIT_WRITE, "CAP_AUDIT_WRITE"},
    {CAP_AUDIT_CONTROL, "CAP_AUDIT_CONTROL"}, {CAP_SETFCAP, "CAP_SETFCAP"}, {CAP_MAC_OVERRIDE, "CAP_MAC_OVERRIDE"},
    {CAP_MAC_ADMIN, "CAP_MAC_ADMIN"}, {CAP_SYSLOG, "CAP_SYSLOG"}, {CAP_WAKE_ALARM, "CAP_WAKE_ALARM"},
    {CAP_BLOCK_SUSPEND, "CAP_BLOCK_SUSPEND"}, {CAP_AUDIT_READ, "CAP_AUDIT_READ"}, {CAP_PERFMON, "CAP_PERFMON"},
    {CAP_BPF, "CAP_BPF"}, {CAP_CHECKPOINT_RESTORE, "CAP_CHECKPOINT_RESTORE"},
};

bool contains(const std::vector<int>& set, int cap) { return std::find(set.begin(), set.end(), cap) != set.end(); }

}  // namespace

const std::vector<int>& sandbox_capabilities() {
  static const std::vector<int> kept = {CAP_CHOWN,  CAP_DAC_OVERRIDE, CAP_FSETID,           CAP_FOWNER,
                                        CAP_SETGID, CAP_SETUID,       CAP_SETPCAP,          CAP_SETFCAP,
                                        CAP_KILL,   CAP_SYS_CHROOT,   CAP_NET_BIND_SERVICE, CAP_AUDIT_WRITE};
  return kept;
}

const std::vector<int>& agent_only_capabilities() {
  static const std::vector<int> agent = {CAP_SYS_ADMIN};
  return agent;
}

std::vector<std::string> capability_names(const std::vector<int>& capabilities) {
  std::vector<std::string> names;
  for (int cap : capabilities) {
    auto named = std::find_if(std::begin(kNames), std::end(kNames), [cap](const Named& n) { return n.number == cap; });
    names.push_back(named != std::end(kNames) ? named->name : "CAP_" + std::to_string(cap));
  }
  return names;
}

bool confine_capabilities() {
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return false;
  const auto& kept = sandbox_capabilities();
  const auto& agent = agent_only_capabilities();
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  auto add = [&](int cap, bool inheritable) {
    auto bit = static_cast<std::uint32_t>(1u << (cap % 32));
    data[cap / 32].permitted |= bit;
    data[cap / 32].effective |= bit;
    if (inheritable) data[cap / 32].inheritable |= bit;
  };
  for (int cap : kept) add(cap, false);
  for (int cap : agent) add(cap, true);
  if (::syscall(SYS_capset, &header, data) != 0) return false;
  for (int cap : agent) {
    if (::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, cap, 0, 0) != 0) return false;
  }
  // Last (a capability leaves the inheritable set's reach with the bound):
  // the bounding set caps what any exec below can ever gain back.
  for (int cap = 0; ::prctl(PR_CAPBSET_READ, cap, 0, 0, 0) >= 0; ++cap) {
    if (!contains(kept, cap) && ::prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0) return false;
  }
  return true;
}

}  // namespace gpubox::host
