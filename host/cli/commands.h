// The `gpubox` commands as one table: the names each answers to, its handler
// (host/cli/) and its entries of `gpubox --help`, which is built from it.
// Compiled into the gpubox executable, which alone links `gpubox mcp`. One thread.
#pragma once

#include <string>
#include <vector>

#include "host/cli/cli.h"
#include "host/cli/help_lines.h"

namespace gpubox::host::cli {

using CommandHandler = int (*)(const std::vector<std::string>& args, const Global& global);

// One command: `gpubox NAME ARGS...` runs run(ARGS).
struct Command {
  std::vector<std::string> names;  // the first is its name, the others aliases ("ls", "list")
  CommandHandler run;
  std::vector<HelpLine> help;      // its entries of `gpubox --help`, in order
};

// Every command, in the order `gpubox --help` lists them.
const std::vector<Command>& commands();

// The command named (or aliased) name, or nullptr.
const Command* find_command(const std::string& name);

// The whole of `gpubox --help`.
std::string top_usage();

}  // namespace gpubox::host::cli
