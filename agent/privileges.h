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

}  // namespace gpubox
