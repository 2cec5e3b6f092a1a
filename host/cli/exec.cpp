// `gpubox exec ID [-i] [-t] -- CMD ARGS...`: runs a command in the sandbox,
// streaming its stdout and stderr live to ours (and, with -i, our stdin to it;
// with -t, on a pseudo-terminal), and exits with its exit code.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "host/cli/cli.h"
#include "host/cli/terminal.h"
#include "host/process_identity.h"
#include "host/resource_limits.h"
#include "base/fd.h"
#include "rpc/client.h"

namespace gpubox::host::cli {
namespace {

constexpr char kExecUsage[] =
    "usage: gpubox exec ID|NAME [-i] [-t] [--timeout S] [--cwd DIR] [--env K=V]... -- CMD ARGS...\n"
    "  -i, --interactive  forward this terminal's (or pipe's) stdin to the command; without it the command reads end of file\n"
    "  -t, --tty          run the command on a pseudo-terminal (window size passed on); with -i, as `docker exec -it`:\n"
    "                     this terminal is in raw mode until the command ends, Ctrl-C and Ctrl-D go to the command\n";

volatile std::sig_atomic_t g_pending_signal = 0;
volatile std::sig_atomic_t g_window_changed = 0;

// What goes to the command besides its params: local stdin (-i) and the window size (-t).
struct ExecInput {
  bool forward_stdin = false;
  bool tty = false;
};

// Runs proc.spawn to its end, writing the command's output to ours as it
// comes and, with -i, our stdin to it as the agent grants credit. Polls in
// slices, so that an agent that dies meanwhile is noticed (a ZeroMQ peer that
// vanishes sends nothing) and a forwarded signal or window size is sent
// promptly. The outer Result fails when the agent could not be followed; the
// inner one is the request's RESULT or ERROR.
Result<Result<nlohmann::json>> run_remote(rpc::Client& client, const ProcessIdentity& agent, const nlohmann::json& params,
                                          ExecInput input) {
  auto opened = client.stream("proc.spawn", params);
  if (!opened) return opened.status();
  rpc::Stream& spawn = **opened;
  bool eof_sent = false;
  std::vector<char> buffer(64 * 1024);
  // Sends one DATA to the command when credit allows; false when it must wait.
  auto send_data = [&](const nlohmann::json& body, std::vector<zmq::message_t> attachments = {}) {
    if (spawn.send_credit() == 0) return false;
    (void)spawn.send(body, std::move(attachments));
    return true;
  };
  while (true) {
    if (int sig = g_pending_signal; sig != 0 && send_data({{"signal", sig}})) g_pending_signal = 0;
    if (input.tty && g_window_changed && spawn.send_credit() > 0) {
      g_window_changed = 0;
      if (auto size = local_window_size()) send_data({{"rows", size->rows}, {"cols", size->cols}});
    }
    if (!eof_sent && !input.forward_stdin && send_data({{"eof", true}})) eof_sent = true;

    Result<std::optional<rpc::Incoming>> got = std::optional<rpc::Incoming>();
    try {
      std::uint64_t credit_before = spawn.send_credit();
      got = spawn.try_next();
      // Fresh credit goes back to the top first: a signal or end of file may wait for it.
      if (got && !got->has_value() && !spawn.ended() && spawn.send_credit() == credit_before) {
        std::vector<zmq::pollitem_t> items = {spawn.poll_item()};
        bool watch_stdin = input.forward_stdin && !eof_sent && spawn.send_credit() > 0;
        if (watch_stdin) items.push_back({nullptr, STDIN_FILENO, ZMQ_POLLIN, 0});
        zmq::poll(items.data(), items.size(), std::chrono::milliseconds(100));
        if (watch_stdin && (items[1].revents & (ZMQ_POLLIN | ZMQ_POLLERR))) {
          ssize_t n = ::read(STDIN_FILENO, buffer.data(), buffer.size());
          if (n > 0) {
            std::vector<zmq::message_t> bytes;
            bytes.emplace_back(buffer.data(), static_cast<std::size_t>(n));
            send_data(nlohmann::json::object(), std::move(bytes));
          } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
            // End of our input: on a terminal the command sees its end-of-file key (Ctrl-D).
            if (input.tty) {
              std::vector<zmq::message_t> eot;
              eot.emplace_back("\x04", 1);
              send_data(nlohmann::json::object(), std::move(eot));
            }
            eof_sent = send_data({{"eof", true}});
            if (!eof_sent) input.forward_stdin = false;  // sent at the next credit
          }
        }
        if (!(items[0].revents & ZMQ_POLLIN)) {
          // pid 0: the agent is no process of this host (a control plane's sandbox).
          if (agent.pid > 0 && !process_alive(agent)) return Status(ErrorCode::unavailable, "the sandbox's agent ended while the command ran");
          continue;
        }
        got = spawn.try_next();
      }
    } catch (const zmq::error_t& e) {
      if (e.num() == EINTR) continue;  // a signal to forward
      return Status(ErrorCode::unavailable, std::string("receiving: ") + e.what());
    }
    if (!got) return got.status();
    if (got->has_value()) {
      const nlohmann::json& body = (*got)->body;
      auto stream = body.find("stream");
      if (stream != body.end() && !(*got)->attachments.empty()) {
        const auto& bytes = (*got)->attachments[0];
        (void)write_fully(*stream == "stderr" ? STDERR_FILENO : STDOUT_FILENO, bytes.data(), bytes.size());
      }
      continue;
    }
    if (spawn.ended()) return spawn.result();
  }
}

}  // namespace

int run_exec(const std::vector<std::string>& raw, const Global&) {
  auto args = parse_args(raw, {"--timeout", "--cwd", "--env"}, {"-i", "--interactive", "-t", "--tty", "-it", "-ti"}, 1);
  if (!args) return fail_usage("exec", args.status());
  if (args->flag("--help")) return show_usage(kExecUsage);
  if (args->positional.size() != 1) return fail_usage("exec", "expected one sandbox id or name");
  if (args->command.empty()) return fail_usage("exec", "expected a command after the sandbox (-- CMD ARGS...)");
  nlohmann::json params = {{"argv", args->command}};
  if (auto timeout = args->last("--timeout")) {
    auto seconds = parse_number(*timeout, 0.001, 604800);
    if (!seconds) return fail_usage("exec", "--timeout: expected seconds, got '" + *timeout + "'");
    params["timeout_s"] = *seconds;
  }
  if (auto cwd = args->last("--cwd")) params["cwd"] = remote_path(*cwd);
  for (const auto& pair : args->all("--env")) {
    auto eq = pair.find('=');
    if (eq == std::string::npos || eq == 0) return fail_usage("exec", "--env: expected NAME=VALUE, got '" + pair + "'");
    params["env"][pair.substr(0, eq)] = pair.substr(eq + 1);
  }
  auto given = [&](std::initializer_list<const char*> names) {
    return std::any_of(names.begin(), names.end(), [&](const char* name) { return args->flag(name); });
  };
  ExecInput input;
  input.forward_stdin = given({"-i", "--interactive", "-it", "-ti"});
  input.tty = given({"-t", "--tty", "-it", "-ti"});
  if (input.tty) {
    WindowSize size = local_window_size().value_or(WindowSize{});
    params["tty"] = true;
    params["rows"] = size.rows;
    params["cols"] = size.cols;
    if (!params.contains("env") || !params["env"].contains("TERM")) {
      const char* term = std::getenv("TERM");
      params["env"]["TERM"] = term && *term ? term : "xterm";
    }
  }
  auto record = find_sandbox(args->positional[0]);
  if (!record) return fail("exec", record.status(), exit_code_for(record.status()));
  auto client = connect_sandbox(*record);
  if (!client) return fail("exec", client.status(), kExitUnreachable);

  // A closed local stdout (| head) must not kill us before we report.
  ::signal(SIGPIPE, SIG_IGN);
  // SIGINT, SIGTERM and SIGHUP are forwarded to the command, as a terminal
  // would deliver them; the command's own exit then ends the CLI.
  struct sigaction forward {};
  forward.sa_handler = [](int sig) { g_pending_signal = sig; };
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) ::sigaction(sig, &forward, nullptr);
  struct sigaction resized {};
  resized.sa_handler = [](int) { g_window_changed = 1; };
  if (input.tty) ::sigaction(SIGWINCH, &resized, nullptr);

  std::optional<RawTerminal> raw_terminal;  // restored on every return below
  if (input.tty && input.forward_stdin) raw_terminal.emplace(STDIN_FILENO);
  auto ran = run_remote(**client, record->agent, params, input);
  raw_terminal.reset();
  if (!ran) {
    int code = ran.status().code() == ErrorCode::unavailable ? kExitUnreachable : kExitFailed;
    return fail("exec", ran.status(), code);
  }
  const Result<nlohmann::json>& result = *ran;
  if (!result) {
    // The command could not start (not found, not executable): as a shell would say it.
    const Status& status = result.status();
    int code = status.code() == ErrorCode::not_found ? 127 : status.code() == ErrorCode::permission_denied ? 126 : kExitFailed;
    return fail("exec", status.to_string(), code);
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
