#include "agent/privileges.h"

#include <linux/capability.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace gpubox {

void withhold_capabilities_from_children() {
  ::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  if (::syscall(SYS_capget, &header, data) != 0) return;
  if (data[0].inheritable == 0 && data[1].inheritable == 0) return;
  data[0].inheritable = data[1].inheritable = 0;
  ::syscall(SYS_capset, &header, data);
}

void hide_secrets_from_sandbox() {
  constexpr char kName[] = "GPUBOX_CONFIG=";
  if (char* value = std::getenv("GPUBOX_CONFIG")) {
    char* entry = value - (sizeof kName - 1);  // getenv points just past "NAME="
    std::size_t size = std::strlen(entry);
    ::unsetenv("GPUBOX_CONFIG");
    ::explicit_bzero(entry, size);
  }
  ::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
}

}  // namespace gpubox
