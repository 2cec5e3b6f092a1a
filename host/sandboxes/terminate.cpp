#include "host/sandboxes/terminate.h"

#include <optional>

#include "host/backends/registry.h"
#include "host/budget/sandbox_budget.h"

namespace gpubox::host {

Status terminate_sandbox(const SandboxStore& store, const SandboxRecord& record, std::chrono::milliseconds grace,
                         bool* killed) {
  auto backend = backend_of(record);
  if (!backend) return backend.status();
  // Under a budget: how long it ran, read before it ends; settled once its end is certain. A remote
  // sandbox whose create never learnt its id may still run there: reconcile settles that one.
  std::string state = (*backend)->state(record);
  std::optional<double> ran_for =
      state == "running" ? budget::sandbox_seconds_if_budgeted(store, record) : std::nullopt;
  bool end_certain = !(*backend)->state_is_remote() || state != "creating";
  Status stopped = (*backend)->terminate(store, record, grace, killed);
  if (stopped && end_certain) (void)budget::settle_ended_sandbox(store, record, ran_for, "terminated by gpubox");
  return stopped;
}

}  // namespace gpubox::host
