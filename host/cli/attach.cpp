// `gpubox attach ID [--connection-file F]`: serves the sandbox's Jupyter
// kernel to local frontends (jupyter console --existing, jupyter_client,
// nbclient, a kernelspec from `gpubox kernelspec install --sandbox ID`).
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <optional>

#include "host/attach/attach_relay.h"
#include "host/cli/cli.h"
#include "host/process_identity.h"

namespace gpubox::host::cli {
namespace {

constexpr char kAttachUsage[] =
    "usage: gpubox attach ID|NAME [--connection-file FILE]\n"
    "Serves the sandbox's Jupyter kernel on 127.0.0.1 until Ctrl-C, SIGTERM or a frontend's shutdown.\n"
    "FILE that exists (a frontend wrote it) gives the ports and key to serve; otherwise attach picks free\n"
    "ports and a fresh key and writes FILE (mode 0600; default: the Jupyter runtime dir,\n"
    "kernel-gpubox-ID-PID.json), prints its path and removes it on exit. Then:\n"
    "  jupyter console --existing FILE\n"
    "Exit codes: 0 after a signal or a frontend's shutdown_request (the sandbox's kernel lives on),\n"
    "1 the sandbox has no kernel, 2 unknown sandbox or bad FILE, 3 the sandbox ended or does not answer.\n";

// Jupyter's runtime dir: $JUPYTER_RUNTIME_DIR, else $JUPYTER_DATA_DIR/runtime, else ~/.local/share/jupyter/runtime.
std::string runtime_dir() {
  if (const char* dir = std::getenv("JUPYTER_RUNTIME_DIR"); dir && *dir) return dir;
  if (const char* dir = std::getenv("JUPYTER_DATA_DIR"); dir && *dir) return std::string(dir) + "/runtime";
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : "/root") + "/.local/share/jupyter/runtime";
}

Status make_dirs(const std::string& path) {
  std::string so_far;
  for (std::size_t at = 1; at != std::string::npos;) {
    at = path.find('/', at + 1);
    so_far = path.substr(0, at);
    if (::mkdir(so_far.c_str(), 0700) != 0 && errno != EEXIST) return Status::from_errno(errno, "cannot create '" + so_far + "'");
  }
  return Status::ok();
}

// Removes the connection file attach wrote, however attach ends.
struct OwnedFile {
  std::string path;
  ~OwnedFile() {
    if (!path.empty()) ::unlink(path.c_str());
  }
};

}  // namespace

int run_attach(const std::vector<std::string>& raw, const Global& global) {
  auto args = parse_args(raw, {"--connection-file"}, {});
  if (!args) return fail_usage("attach", args.status());
  if (args->flag("--help")) return show_usage(kAttachUsage);
  if (args->positional.size() != 1 || args->has_double_dash) {
    return fail_usage("attach", "expected one sandbox id or name");
  }
  // Signals are taken from a signalfd, on this thread only: block them before
  // any ZeroMQ thread exists, so that every thread inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&signals, sig);
  ::sigprocmask(SIG_BLOCK, &signals, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
  int signal_fd = ::signalfd(-1, &signals, SFD_CLOEXEC | SFD_NONBLOCK);
  if (signal_fd < 0) return fail("attach", "signalfd failed", kExitFailed);

  auto record = find_sandbox(args->positional[0]);
  if (!record) return fail("attach", record.status(), exit_code_for(record.status()));

  // The local side: the frontend's connection file, or a fresh one.
  std::optional<std::string> given = args->last("--connection-file");
  ConnectionInfo local;
  bool write_file = true;
  std::string path;
  if (given) {
    if (given->empty()) return fail_usage("attach", "--connection-file: expected a path");
    path = *given;
    if (::access(path.c_str(), F_OK) == 0) {
      auto read = read_connection_file(path);
      if (!read) return fail("attach", read.status(), kExitUsage);
      local = std::move(*read);
      write_file = false;
    }
  } else {
    std::string dir = runtime_dir();
    if (Status made = make_dirs(dir); !made) return fail("attach", made.message(), kExitFailed);
    path = dir + "/kernel-gpubox-" + record->id + "-" + std::to_string(::getpid()) + ".json";
  }
  if (write_file) {
    auto key = random_hex_key();
    if (!key) return fail("attach", key.status(), kExitFailed);
    local.key = *key;
    local.kernel_name = "gpubox";
  }

  auto client = connect_sandbox(*record);
  if (!client) return fail("attach", client.status(), kExitUnreachable);
  auto relay = AttachRelay::bind(local);
  if (!relay) return fail("attach", relay.status(), kExitFailed);
  // The file is written (and the hint printed) once the agent has opened the
  // relay, so a sandbox without a kernel leaves nothing behind.
  OwnedFile owned;
  auto on_ready = [&]() -> Status {
    if (!write_file) return Status::ok();
    if (Status written = write_connection_file(path, (*relay)->connection()); !written) return written;
    owned.path = path;
    if (global.json) {
      std::printf("%s\n", nlohmann::json({{"connection_file", path}, {"sandbox", record->id}}).dump().c_str());
    } else {
      std::printf("connection file: %s\nconnect with:    jupyter console --existing %s\n", path.c_str(), path.c_str());
    }
    std::fflush(stdout);
    return Status::ok();
  };

  // A sandbox whose agent runs elsewhere (no local pid) is followed through the stream alone.
  ProcessIdentity agent = record->agent;
  auto agent_alive = [agent] { return agent.pid <= 0 || process_alive(agent); };
  auto ended = (*relay)->run(**client, signal_fd, agent_alive, on_ready);
  ::close(signal_fd);
  if (!ended) {
    const Status& status = ended.status();
    bool gone = !agent_alive();
    if (!(*relay)->ready() && !gone) {
      // The agent answers but will not relay (its kernel is disabled), or F could not be written.
      return fail("attach", "sandbox " + record->id + ": " + status.message(), kExitFailed);
    }
    if (status.code() == ErrorCode::unavailable || gone) {
      return fail("attach", "sandbox " + record->id + ": " + status.message() + "; the kernel is gone, attach stops",
                  kExitUnreachable);
    }
    return fail("attach", "sandbox " + record->id + ": " + status.to_string(), kExitFailed);
  }
  return kExitOk;
}

}  // namespace gpubox::host::cli
