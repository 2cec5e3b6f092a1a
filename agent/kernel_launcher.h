// Starts the kernel's Python executor through the agent's process table, so
// that PID 1's reaping of every child hands the executor's exit status back
// here instead of losing it.
#pragma once

#include <memory>

#include "agent/process_table.h"
#include "kernel/python_executor.h"

namespace gpubox {

std::unique_ptr<kernel::ExecutorLauncher> make_table_launcher(ProcessLauncher& launcher);

}  // namespace gpubox
