// Parses gpubox-agent's command line into what main() runs. Pure: reads no
// environment and no files except the --config file or the --config-fd
// descriptor it names (which it reads to the end and closes).
#pragma once

#include <string>
#include <vector>

#include "agent/config.h"

namespace gpubox {

struct CommandLine {
  enum class Mode { run, version, help, check_config, keygen, kernel };
  Mode mode = Mode::run;
  Config config;
  std::vector<std::string> command;  // after "--": the main child, like tini
  int ready_fd = -1;                 // "ready\n" is written here once the agent is ready
  // A directory of the host that no other process of the sandbox can reach:
  // the agent's log, its exit record and an ipc:// endpoint for the host go
  // there, not into the state dir (the local backend's, docs/security.md).
  int host_dir_fd = -1;
  // Mode::kernel (`gpubox-agent kernel -f FILE [--python PATH] [--plain]`): the standalone Jupyter kernel.
  std::string kernel_connection_file;
  std::string kernel_python = "python3";
  bool kernel_plain = false;
};

// argv excludes the program name. env_config is GPUBOX_CONFIG's value or null.
// The document comes from --config FILE or --config-fd FD, else from GPUBOX_CONFIG, else is {};
// flags then override single fields. Errors are one line naming the flag or key.
Result<CommandLine> parse_command_line(const std::vector<std::string>& args, const char* env_config);

extern const char kUsage[];

}  // namespace gpubox
