// gpubox: the host-side CLI. Parses the global options, finds the command in
// the table (host/cli/commands.h) and hands over; the commands live in host/cli/.
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "base/terminal_text.h"
#include "base/version.h"
#include "host/cli/cli.h"
#include "host/cli/commands.h"
#include <nlohmann/json.hpp>

int main(int argc, char** argv) {
  using namespace gpubox::host::cli;
  std::vector<std::string> args(argv + 1, argv + argc);
  Global global;
  while (!args.empty() && args[0] == "--json") {
    global.json = true;
    args.erase(args.begin());
  }
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    std::fputs(top_usage().c_str(), args.empty() ? stderr : stdout);
    return args.empty() ? kExitUsage : kExitOk;
  }
  if (args[0] == "--version") {
    if (global.json) {
      std::printf("%s\n", nlohmann::json{{"version", gpubox::kVersion}, {"protocol_version", gpubox::kProtocolVersion}}.dump().c_str());
    } else {
      std::printf("gpubox %s (agent protocol %d)\n", gpubox::kVersion, gpubox::kProtocolVersion);
    }
    return kExitOk;
  }
  std::string command = args[0];
  args.erase(args.begin());
  // --json after the command (before its --) also makes errors JSON.
  for (const auto& arg : args) {
    if (arg == "--") break;
    if (arg == "--json") global.json = true;
  }
  set_json_errors(global.json);
  // Exceptions stop here: a bug must still end with a message and an exit code.
  try {
    if (const Command* found = find_command(command)) return found->run(args, global);
  } catch (const std::exception& e) {
    return fail(command, std::string("internal error: ") + e.what(), kExitFailed);
  }
  // One line and where the list is (a typo should not scroll 43 lines of usage past).
  std::string unknown = "unknown command '" + command + "' (see gpubox --help)";
  if (global.json) return fail(command, unknown, kExitUsage);
  std::fprintf(stderr, "gpubox: %s\n", gpubox::escape_for_terminal(unknown).c_str());  // what was typed acts on nothing
  return kExitUsage;
}
