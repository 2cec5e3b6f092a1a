// `gpubox terminate ID... | --all`: stops sandboxes and removes their state
// and the kernelspecs that attach to them.
#include <cstdio>
#include <ctime>
#include <iostream>

#include "host/backends/backend.h"
#include "base/terminal_text.h"
#include "host/cli/cli.h"
#include "host/kernelspecs.h"
#include "host/sandboxes/state.h"
#include "host/sandboxes/terminate.h"

namespace gpubox::host::cli {

int run_terminate(const std::vector<std::string>& raw, const Global& global) {
  constexpr char kUsage[] = "usage: gpubox terminate ID|NAME... | --all [--json]\n";
  auto args = parse_args(raw, {}, {"--all"});
  if (!args) return fail_usage("terminate", args.status());
  if (args->flag("--help")) return show_usage(kUsage);
  bool all = args->flag("--all");
  if (all == !args->positional.empty()) return fail_usage("terminate", "expected sandbox ids or names, or --all");
  auto store = SandboxStore::open_default();
  if (!store) return fail("terminate", store.status(), kExitUsage);
  std::vector<SandboxRecord> targets;
  int code = kExitOk;
  if (all) {
    // A sandbox another CLI is creating right now is left alone (by --all, not by id).
    for (auto& record : store->list()) {
      if (sandbox_state(record) == "creating" && static_cast<double>(::time(nullptr)) - record.created_at < 30) continue;
      targets.push_back(std::move(record));
    }
  } else {
    for (const auto& name : args->positional) {
      auto record = store->resolve(name);
      if (!record) {
        code = std::max(code, fail("terminate", record.status(), exit_code_for(record.status())));
        continue;
      }
      targets.push_back(std::move(*record));
    }
  }
  nlohmann::json done = nlohmann::json::array();
  for (const auto& record : targets) {
    std::string was = sandbox_state(record);
    auto grace = std::chrono::milliseconds(static_cast<long long>(record.spec.value("grace_s", 10.0) * 1000));
    bool killed = false;
    Status stopped = terminate_sandbox(*store, record, grace, &killed);
    if (!stopped) {
      code = std::max(code, fail("terminate", record.id + ": " + stopped.message(), kExitFailed));
      continue;
    }
    std::vector<std::string> specs = remove_sandbox_kernelspecs(record.id);
    done.push_back({{"id", record.id}, {"name", record.name}, {"was", was}, {"killed", killed}, {"kernelspecs_removed", specs}});
    if (!(global.json || args->flag("--json"))) {
      std::printf("%s%s\n", escape_for_terminal(record.id).c_str(), was == "dead" ? " (was dead; cleaned up)" : killed ? " (killed after the grace)" : "");
      for (const auto& spec : specs) std::printf("  removed its kernelspec %s\n", escape_for_terminal(spec).c_str());
    }
  }
  if (global.json || args->flag("--json")) std::cout << done.dump() << "\n";
  return code;
}

}  // namespace gpubox::host::cli
