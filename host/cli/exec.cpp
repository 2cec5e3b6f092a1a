// `gpubox exec ID -- CMD ARGS...`: runs a command in the sandbox, streaming its
// stdout and stderr live to ours, and exits with its exit code.
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "host/cli/cli.h"
#include "host/resource_limits.h"

namespace gpubox::host::cli {
namespace {

constexpr char kUsage[] =
    "usage: gpubox exec ID|NAME [--timeout S] [--cwd DIR] [--env K=V]... -- CMD ARGS...\n";

bool write_all(int fd, const void* data, size_t size) {
  const char* at = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = ::write(fd, at, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    at += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

int run_exec(const std::vector<std::string>& raw, const Global&) {
  auto args = parse_args(raw, {"--timeout", "--cwd", "--env"}, {}, 1);
  if (!args) return fail("exec", args.status().message(), kExitUsage, kUsage);
  if (args->flag("--help")) return show_usage(kUsage);
  if (args->positional.size() != 1) return fail("exec", "expected one sandbox id or name", kExitUsage, kUsage);
  if (args->command.empty()) return fail("exec", "expected a command after the sandbox (-- CMD ARGS...)", kExitUsage, kUsage);
  nlohmann::json params = {{"argv", args->command}};
  if (auto timeout = args->last("--timeout")) {
    auto seconds = parse_number(*timeout, 0.001, 604800);
    if (!seconds) return fail("exec", "--timeout: expected seconds, got '" + *timeout + "'", kExitUsage, kUsage);
    params["timeout_s"] = *seconds;
  }
  if (auto cwd = args->last("--cwd")) params["cwd"] = remote_path(*cwd);
  for (const auto& pair : args->all("--env")) {
    auto eq = pair.find('=');
    if (eq == std::string::npos || eq == 0) return fail("exec", "--env: expected NAME=VALUE, got '" + pair + "'", kExitUsage, kUsage);
    params["env"][pair.substr(0, eq)] = pair.substr(eq + 1);
  }
  auto record = find_sandbox(args->positional[0]);
  if (!record) return fail("exec", record.status().message(), exit_code_for(record.status()));
  auto client = connect_sandbox(*record);
  if (!client) return fail("exec", client.status().message(), kExitUnreachable);

  // A closed local stdout (| head) must not kill us before we report.
  ::signal(SIGPIPE, SIG_IGN);
  auto stream = (*client)->stream("proc.spawn", params);
  if (!stream) return fail("exec", stream.status().to_string(), kExitFailed);
  bool stdin_closed = false;
  while (true) {
    auto next = (*stream)->next();
    if (!next) return fail("exec", next.status().to_string(), exit_code_for(next.status()) == kExitUnreachable ? kExitUnreachable : kExitFailed);
    if (!next->has_value()) break;
    const auto& body = (*next)->body;
    if (body.contains("pid") && !stdin_closed) {
      // Local stdin is not forwarded: the command sees end of file at once.
      stdin_closed = true;
      (void)(*stream)->send({{"eof", true}});
      continue;
    }
    auto name = body.find("stream");
    if (name == body.end() || (*next)->attachments.empty()) continue;
    const auto& bytes = (*next)->attachments[0];
    write_all(*name == "stderr" ? STDERR_FILENO : STDOUT_FILENO, bytes.data(), bytes.size());
  }
  const auto& result = (*stream)->result();
  if (!result) {
    // The command could not start (not found, not executable): as a shell would say it.
    const Status& status = result.status();
    std::fprintf(stderr, "gpubox exec: %s\n", status.to_string().c_str());
    if (status.code() == ErrorCode::not_found) return 127;
    if (status.code() == ErrorCode::permission_denied) return 126;
    return kExitFailed;
  }
  const nlohmann::json& outcome = result.value();
  if (outcome.value("timed_out", false)) {
    std::fprintf(stderr, "gpubox exec: the command ran past --timeout and was killed\n");
    return 124;
  }
  if (outcome.contains("signal") && outcome["signal"].is_number()) {
    int sig = outcome["signal"].get<int>();
    std::string why = "the command was killed by signal " + std::to_string(sig) + " (" + ::strsignal(sig) + ")";
    LimitPlan plan = LimitPlan::from_json(record->spec.value("limit_plan", nlohmann::json::object()));
    long long kills = oom_kill_count(plan);
    if (sig == SIGKILL && kills > 0) {
      why += ": out of memory — the sandbox's memory limit is " +
             std::to_string(record->spec.value("memory_mib", 0ULL)) + " MiB (" + std::to_string(kills) +
             " OOM kill(s) so far)";
    }
    std::fprintf(stderr, "gpubox exec: %s\n", why.c_str());
    return 128 + sig;
  }
  if (outcome.contains("exit_code") && outcome["exit_code"].is_number()) return outcome["exit_code"].get<int>();
  return kExitFailed;
}

}  // namespace gpubox::host::cli
