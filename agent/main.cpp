// gpubox-agent: parses, wires and runs. Logic lives in gpubox_agent_core.
#include <malloc.h>

#include <cstdio>
#include <cstdlib>

#include "agent/agent.h"
#include "agent/privileges.h"
#include "agent/signals.h"
#include "base/version.h"
#include "kernel/standalone_kernel.h"
#include "rpc/keys.h"

int main(int argc, char** argv) {
  // Before any thread exists, so that every thread inherits the mask.
  gpubox::block_signals();
  // Before any thread exists too: what PID 1 was handed for itself is not its children's.
  gpubox::withhold_capabilities_from_children();
  // Bulk transfers allocate 1 MiB message buffers at a high rate: keep them in
  // the heap (a fixed mmap threshold; glibc's adaptive one flips back and forth)
  // and keep up to 16 MiB free there rather than faulting it in again; at most
  // two arenas, so idle worker threads do not each hold freed memory.
  mallopt(M_MMAP_THRESHOLD, 4 << 20);
  mallopt(M_TRIM_THRESHOLD, 16 << 20);
  mallopt(M_ARENA_MAX, 2);

  std::vector<std::string> args(argv + 1, argv + argc);
  auto line = gpubox::parse_command_line(args, std::getenv("GPUBOX_CONFIG"));
  gpubox::hide_secrets_from_sandbox();  // the config is parsed: its copy in the environment goes
  if (!line) {
    std::fprintf(stderr, "gpubox-agent: %s\n", line.status().message().c_str());
    return gpubox::kExitUsage;
  }
  switch (line->mode) {
    case gpubox::CommandLine::Mode::version:
      std::printf("gpubox-agent %s (protocol %d)\n", gpubox::kVersion, gpubox::kProtocolVersion);
      return 0;
    case gpubox::CommandLine::Mode::help:
      std::fputs(gpubox::kUsage, stdout);
      return 0;
    case gpubox::CommandLine::Mode::check_config:
      std::printf("%s\n", gpubox::config_to_json(line->config).c_str());
      return 0;
    case gpubox::CommandLine::Mode::keygen: {
      auto keys = gpubox::rpc::generate_keypair();
      if (!keys) {
        std::fprintf(stderr, "gpubox-agent: %s\n", keys.status().message().c_str());
        return 1;
      }
      std::printf("{\"public_key\": \"%s\", \"secret_key\": \"%s\"}\n", keys->public_key.c_str(), keys->secret_key.c_str());
      return 0;
    }
    case gpubox::CommandLine::Mode::kernel:
      return gpubox::kernel::run_standalone_kernel(
          {line->kernel_connection_file, line->kernel_python, line->kernel_plain ? "plain" : ""});
    case gpubox::CommandLine::Mode::run:
      break;
  }
  return gpubox::Agent(std::move(*line)).run();
}
