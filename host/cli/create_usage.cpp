#include "host/cli/create_usage.h"

#include <set>

namespace gpubox::host::cli {

std::string backend_choices(const std::vector<const Backend*>& backends) {
  std::string choices;
  for (const Backend* backend : backends) choices += (choices.empty() ? "" : "|") + backend->name();
  return choices;
}

HelpLine create_help(const std::vector<const Backend*>& backends) {
  return {"create [options]", "create a sandbox and print its id (gpubox create --help);\n--backend " + backend_choices(backends) +
                                  ", --from-snapshot NAME"};
}

std::string create_usage(const std::vector<const Backend*>& backends) {
  std::string usage =
      "usage: gpubox create [--backend " + backend_choices(backends) +
      "] [--config FILE] [--name NAME] [--cpu N] [--memory MiB] [--pids N]\n"
      "                     [--timeout S] [--idle-timeout S] [--network NETWORK] [--env K=V]... [--secret NAME]...\n"
      "                     [--mount LOCAL:SANDBOX[:ro]]... [--gpu GPUS] [--seccomp default|unconfined] [--models-optional] [--json]\n";
  // Backends that share a folder (podman, docker) say the same once.
  std::set<std::string> shown;
  for (const Backend* backend : backends) {
    std::string lines = backend->create_synopsis();
    if (shown.insert(lines).second) usage += lines;
  }
  usage +=
      "       gpubox create --from-snapshot NAME [options]   a new sandbox from a snapshot (gpubox snapshots);\n"
      "                     its settings first, the options given override them\n"
      "  --models-optional  keep the sandbox when a model of its config fails to load (default: create fails\n"
      "              with the model's reason and ends the sandbox)\n";
  shown.clear();
  for (const Backend* backend : backends) {
    std::string lines = backend->create_options_help();
    if (shown.insert(lines).second) usage += lines;
  }
  return usage +
         "  --budget    the budget that holds this sandbox's cost before it is created (default: the default\n"
         "              budget, if one is set; none: no budget); past its ceiling nothing is created (docs/budget.md)\n";
}

}  // namespace gpubox::host::cli
