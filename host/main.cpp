// gpubox: the host-side CLI. Parses the subcommand and hands over.
#include <cstdio>
#include <string>
#include <vector>

#include "host/rpc_command.h"

namespace {

constexpr char kUsage[] =
    "usage: gpubox COMMAND ...\n"
    "commands:\n"
    "  rpc ENDPOINT METHOD [JSON]   call one RPC method of an agent and print the result\n";

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    std::fputs(kUsage, args.empty() ? stderr : stdout);
    return args.empty() ? 2 : 0;
  }
  std::string command = args[0];
  args.erase(args.begin());
  if (command == "rpc") return gpubox::host::run_rpc_command(args);
  std::fprintf(stderr, "gpubox: unknown command '%s'\n%s", command.c_str(), kUsage);
  return 2;
}
