// What the agent keeps for itself: capabilities handed to it through the
// ambient set (the local backend gives it CAP_SYS_ADMIN that way, for the
// mounts it makes, while its bounding set holds only what user code may
// have) are cleared from its ambient and inheritable sets, so the processes
// it starts get at most the bounding set. Call first in main, before any
// thread exists: capabilities belong to a thread. Harmless where nothing was
// handed over.
#pragma once

namespace gpubox {

void withhold_capabilities_from_children();

// Keeps the agent's secrets from sandbox code: the config handed in the
// environment (GPUBOX_CONFIG: the CURVE server key, the --secret values) is
// removed from the environment and its bytes in the initial environment
// block, which /proc/1/environ shows, are overwritten; and the agent becomes
// non-dumpable, so that a process without CAP_SYS_PTRACE (all sandbox code)
// can neither ptrace it nor read its /proc/PID/{environ,mem,maps,fd}. Call
// once the config is parsed, before any thread exists.
void hide_secrets_from_sandbox();

}  // namespace gpubox
