// `gpubox exec ID -- CMD ARGS...`: runs a command in the sandbox, streaming its
// stdout and stderr live to ours, and exits with its exit code.
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>

#include "host/cli/cli.h"
#include "host/process_identity.h"
#include "host/resource_limits.h"
#include "rpc/fd.h"
#include "rpc/protocol.h"

namespace gpubox::host::cli {
namespace {

constexpr char kUsage[] =
    "usage: gpubox exec ID|NAME [--timeout S] [--cwd DIR] [--env K=V]... -- CMD ARGS...\n";

volatile std::sig_atomic_t g_pending_signal = 0;

// Sends one message of request id.
Status send(rpc::Client& client, std::uint64_t id, rpc::Kind kind, const nlohmann::json& body, std::uint64_t credit = 0) {
  rpc::Header header;
  header.id = id;
  header.kind = kind;
  header.credit = credit;
  return client.send_message(header, body);
}

// Runs proc.spawn to its end, writing the command's output to ours as it
// comes. Waits in slices, so that an agent that dies meanwhile is noticed
// (a ZeroMQ peer that vanishes sends nothing) and a forwarded signal is sent
// promptly. The outer Result fails when the agent could not be followed; the
// inner one is the request's RESULT or ERROR.
Result<Result<nlohmann::json>> run_remote(rpc::Client& client, const ProcessIdentity& agent, const nlohmann::json& params) {
  constexpr std::uint64_t kWindow = rpc::kDefaultWindow;
  const std::uint64_t id = client.next_id();
  rpc::Header call;
  call.id = id;
  call.kind = rpc::Kind::call;
  call.method = "proc.spawn";
  call.credit = kWindow;
  if (Status sent = client.send_message(call, params); !sent) return sent;
  std::uint64_t send_credit = 0, consumed = 0;
  bool eof_sent = false;
  while (true) {
    if (int sig = g_pending_signal; sig != 0 && send_credit > 0) {
      g_pending_signal = 0;
      --send_credit;
      (void)send(client, id, rpc::Kind::data, {{"signal", sig}});
    }
    Result<rpc::Received> got = Status(ErrorCode::unavailable, "");
    try {
      got = client.receive(id, std::chrono::milliseconds(100));
    } catch (const zmq::error_t& e) {
      if (e.num() == EINTR) continue;  // a signal to forward
      return Status(ErrorCode::unavailable, std::string("receiving: ") + e.what());
    }
    if (!got) {
      if (got.status().code() != ErrorCode::unavailable) return got.status();
      if (!process_alive(agent)) return Status(ErrorCode::unavailable, "the sandbox's agent ended while the command ran");
      continue;
    }
    switch (got->kind) {
      case rpc::Kind::credit:
        send_credit += got->credit;
        if (!eof_sent && send_credit > 0) {
          // Local stdin is not forwarded: the command sees end of file at once.
          eof_sent = true;
          --send_credit;
          (void)send(client, id, rpc::Kind::data, {{"eof", true}});
        }
        break;
      case rpc::Kind::data: {
        auto stream = got->body.find("stream");
        if (stream != got->body.end() && !got->attachments.empty()) {
          const auto& bytes = got->attachments[0];
          (void)write_fully(*stream == "stderr" ? STDERR_FILENO : STDOUT_FILENO, bytes.data(), bytes.size());
        }
        if (++consumed >= kWindow / 2) {
          (void)send(client, id, rpc::Kind::credit, nlohmann::json::object(), consumed);
          consumed = 0;
        }
        break;
      }
      case rpc::Kind::result:
        return Result<nlohmann::json>(std::move(got->body));
      case rpc::Kind::error:
        return Result<nlohmann::json>(rpc::status_from_error_body(got->body));
      default:
        return Status(ErrorCode::internal, "the agent sent an unexpected message kind");
    }
  }
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
  // SIGINT, SIGTERM and SIGHUP are forwarded to the command, as a terminal
  // would deliver them; the command's own exit then ends the CLI.
  struct sigaction forward {};
  forward.sa_handler = [](int sig) { g_pending_signal = sig; };
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) ::sigaction(sig, &forward, nullptr);

  auto ran = run_remote(**client, record->agent, params);
  if (!ran) {
    int code = ran.status().code() == ErrorCode::unavailable ? kExitUnreachable : kExitFailed;
    return fail("exec", ran.status().message(), code);
  }
  const Result<nlohmann::json>& result = *ran;
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
