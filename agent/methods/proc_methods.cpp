#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <sstream>

#include "agent/methods/methods.h"
#include "agent/methods/process_runner.h"
#include "rpc/inbound_stream.h"
#include "rpc/params.h"

namespace gpubox {
namespace {

using nlohmann::json;
constexpr std::int64_t kDefaultMaxOutput = 16 << 20;

// The params proc.exec and proc.spawn share.
struct CommandParams {
  SpawnOptions spawn;
  std::optional<std::chrono::steady_clock::time_point> deadline;
  std::string stdin_bytes;
  std::size_t max_output = kDefaultMaxOutput;
  std::optional<ProcessRunner::TerminalSize> tty;  // proc.spawn's tty: a pty of this size
};

// A window size from the fields rows and cols (both or neither); nullopt when absent or bad.
std::optional<ProcessRunner::TerminalSize> read_size(rpc::ParamReader& fields) {
  auto rows = fields.integer("rows", 1, 65535);
  auto cols = fields.integer("cols", 1, 65535);
  if (!rows && !cols) return std::nullopt;
  return ProcessRunner::TerminalSize{static_cast<unsigned short>(rows.value_or(24)), static_cast<unsigned short>(cols.value_or(80))};
}

// with_stdin: proc.exec's stdin bytes; otherwise proc.spawn's tty, rows and cols.
Result<CommandParams> read_command(rpc::CallContext& call, const AgentAccess& agent, bool with_stdin) {
  rpc::ParamReader params(call.params());
  auto argv = params.string_list("argv");
  auto shell = params.string("shell");
  auto env = params.string_map("env");
  auto cwd = params.path("cwd", false);
  auto timeout = params.number("timeout_s", 0, 30 * 24 * 3600);
  auto max_output = params.integer("max_output_bytes", 0, std::int64_t{1} << 32);
  std::optional<std::string> stdin_bytes;
  std::optional<bool> tty;
  std::optional<ProcessRunner::TerminalSize> size;
  if (with_stdin) {
    stdin_bytes = params.bytes("stdin");
  } else {
    tty = params.boolean("tty");
    size = read_size(params);
  }
  if (Status status = params.finish(); !status) return status;
  if (size && !tty.value_or(false)) return Status(ErrorCode::invalid_request, "params.rows, params.cols: only with tty: true");
  if (argv.has_value() == shell.has_value()) {
    return Status(ErrorCode::invalid_request, "params: give exactly one of argv (an array) and shell (a string)");
  }
  if (argv && (argv->empty() || (*argv)[0].empty())) {
    return Status(ErrorCode::invalid_request, "params.argv: expected a non-empty array whose first element names a program");
  }
  if (shell && shell->find('\0') != std::string::npos) {
    return Status(ErrorCode::invalid_request, "params.shell: holds a NUL byte");
  }
  CommandParams command;
  command.spawn.argv = argv ? *argv : std::vector<std::string>{"/bin/sh", "-c", *shell};
  std::vector<std::pair<std::string, std::string>> overrides = agent.child_env;
  if (env) {
    for (const auto& [name, value] : *env) {
      if (name.empty() || name.find('=') != std::string::npos || name.find('\0') != std::string::npos ||
          value.find('\0') != std::string::npos) {
        return Status(ErrorCode::invalid_request, "params.env." + name + ": expected a name without '=' and values without NUL bytes");
      }
      overrides.emplace_back(name, value);
    }
  }
  command.spawn.env = build_environment(overrides, {"GPUBOX_CONFIG"});
  if (cwd) command.spawn.cwd = *cwd;
  auto now = std::chrono::steady_clock::now();
  if (timeout) command.deadline = now + std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(*timeout));
  if (stdin_bytes) command.stdin_bytes = std::move(*stdin_bytes);
  if (max_output) command.max_output = static_cast<std::size_t>(*max_output);
  if (tty.value_or(false)) command.tty = size.value_or(ProcessRunner::TerminalSize{});
  return command;
}

Status refuse_if_stopping(const AgentAccess& agent) {
  if (agent.accepting_work && !agent.accepting_work()) {
    return Status(ErrorCode::unavailable, "the agent is shutting down and starts no new processes");
  }
  return Status::ok();
}

json outcome_json(const ProcessRunner::Outcome& outcome, pid_t pid) {
  json result = {{"exit_code", nullptr}, {"signal", nullptr}, {"timed_out", outcome.timed_out},
                 {"wall_s", outcome.wall_s}, {"pid", pid}};
  if (outcome.status) {
    if (outcome.status->signal) {
      result["signal"] = outcome.status->signal;
    } else {
      result["exit_code"] = outcome.status->code;
    }
  }
  return result;
}

Result<json> proc_exec(rpc::CallContext& call, ProcessLauncher& launcher, const AgentAccess& agent) {
  auto command = read_command(call, agent, true);
  if (!command) return command.status();
  if (Status status = refuse_if_stopping(agent); !status) return status;
  auto runner = ProcessRunner::start(launcher, command->spawn);
  if (!runner) return runner.status();
  (*runner)->write_stdin(std::move(command->stdin_bytes));
  (*runner)->close_stdin();
  std::string out, err;
  bool out_truncated = false, err_truncated = false;
  auto outcome = (*runner)->run(
      [&](ProcessRunner::Stream stream, std::string_view bytes) {
        bool is_out = stream == ProcessRunner::Stream::stdout_stream;
        std::string& sink = is_out ? out : err;
        std::size_t room = command->max_output > sink.size() ? command->max_output - sink.size() : 0;
        if (bytes.size() > room) (is_out ? out_truncated : err_truncated) = true;
        sink.append(bytes.substr(0, room));
        return Status::ok();
      },
      command->deadline, call.stop_fd());
  if (!outcome) return outcome.status();
  if (Status stopped = call.stop_reason(); !stopped) return stopped;
  json result = outcome_json(*outcome, (*runner)->pid());
  result["stdout"] = rpc::binary(out);
  result["stderr"] = rpc::binary(err);
  result["stdout_truncated"] = out_truncated;
  result["stderr_truncated"] = err_truncated;
  return result;
}

// Applies one DATA message of proc.spawn: stdin bytes, EOF, a signal or a window size.
Status apply_spawn_input(ProcessRunner& runner, rpc::Incoming& input) {
  rpc::ParamReader fields(input.body);
  auto stdin_bytes = fields.bytes("stdin");
  auto eof = fields.boolean("eof");
  auto sig = fields.integer("signal", 1, 64);
  auto size = read_size(fields);
  if (Status status = fields.finish(); !status) return status;
  if (size) {
    if (Status resized = runner.resize(*size); !resized) return resized;
  }
  if (stdin_bytes) runner.write_stdin(std::move(*stdin_bytes));
  for (auto& attachment : input.attachments) runner.write_stdin(attachment.to_string());
  if (eof.value_or(false)) runner.close_stdin();
  if (sig) runner.signal(static_cast<int>(*sig));
  return Status::ok();
}

Result<json> proc_spawn(rpc::CallContext& call, ProcessLauncher& launcher, const AgentAccess& agent) {
  auto command = read_command(call, agent, false);
  if (!command) return command.status();
  if (Status status = refuse_if_stopping(agent); !status) return status;
  auto started = ProcessRunner::start(launcher, command->spawn, command->tty);
  if (!started) return started.status();
  ProcessRunner& runner = **started;
  if (Status sent = call.send_data(json{{"pid", runner.pid()}}); !sent) return sent;
  constexpr std::uint64_t kStdinWindow = 16;  // DATA (stdin, signals, sizes) a client may send ahead
  rpc::InboundStream input(call, {.window = kStdinWindow});
  auto take_input = [&]() -> Status {
    while (true) {
      auto next = input.try_next();
      if (!next) return next.status();
      if (!next->has_value()) return Status::ok();
      if (Status applied = apply_spawn_input(runner, **next); !applied) return applied;
    }
  };
  auto outcome = runner.run(
      [&](ProcessRunner::Stream stream, std::string_view bytes) {
        std::vector<zmq::message_t> chunk;
        chunk.emplace_back(bytes.data(), bytes.size());
        const char* name = stream == ProcessRunner::Stream::stdout_stream ? "stdout" : "stderr";
        return call.send_data(json{{"stream", name}}, std::move(chunk));
      },
      command->deadline, call.stop_fd(), input.poll_fd(), take_input);
  if (Status stopped = call.stop_reason(); !stopped) return stopped;
  if (!outcome) return outcome.status();
  return outcome_json(*outcome, runner.pid());
}

Result<json> proc_signal(rpc::CallContext& call) {
  rpc::ParamReader params(call.params());
  auto pid = params.integer("pid", 2, 4'194'304, true);
  auto sig = params.integer("signal", 0, 64, true);
  auto group = params.boolean("group");
  if (Status status = params.finish(); !status) return status;
  if (*pid == ::getpid()) return Status(ErrorCode::permission_denied, "params.pid: that is the agent itself; use sys.shutdown");
  pid_t target = static_cast<pid_t>(group.value_or(false) ? -*pid : *pid);
  if (::kill(target, static_cast<int>(*sig)) != 0) {
    return Status::from_errno(errno, "cannot signal " + std::string(group.value_or(false) ? "process group " : "pid ") + std::to_string(*pid));
  }
  return json::object();
}

std::map<unsigned, std::string> read_user_names() {
  // No NSS in a static binary: read /etc/passwd directly.
  std::map<unsigned, std::string> names;
  std::ifstream passwd("/etc/passwd");
  std::string line;
  while (std::getline(passwd, line)) {
    std::stringstream fields(line);
    std::string name, password, uid;
    if (std::getline(fields, name, ':') && std::getline(fields, password, ':') && std::getline(fields, uid, ':')) {
      try {
        names[static_cast<unsigned>(std::stoul(uid))] = name;
      } catch (const std::exception&) {
      }
    }
  }
  return names;
}

std::optional<json> describe_process(int pid, const std::map<unsigned, std::string>& users, long page_size, long ticks) {
  std::string base = "/proc/" + std::to_string(pid);
  std::ifstream stat_file(base + "/stat");
  std::string stat;
  if (!std::getline(stat_file, stat)) return std::nullopt;
  auto close = stat.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::stringstream rest(stat.substr(close + 2));
  std::vector<std::string> fields;
  std::string field;
  while (rest >> field) fields.push_back(field);
  if (fields.size() < 22) return std::nullopt;
  // fields[0] is stat's 3rd field (state); utime is the 14th, stime 15th, rss 24th.
  double cpu = (std::stod(fields[11]) + std::stod(fields[12])) / static_cast<double>(ticks);
  long long rss = std::stoll(fields[21]) * page_size;
  unsigned uid = 0;
  std::ifstream status_file(base + "/status");
  std::string line;
  while (std::getline(status_file, line)) {
    if (line.rfind("Uid:", 0) == 0) {
      uid = static_cast<unsigned>(std::stoul(line.substr(4)));
      break;
    }
  }
  std::ifstream cmdline_file(base + "/cmdline", std::ios::binary);
  std::vector<std::string> cmdline;
  std::string arg;
  while (std::getline(cmdline_file, arg, '\0')) cmdline.push_back(arg);
  if (cmdline.empty()) cmdline.push_back("[" + stat.substr(stat.find('(') + 1, close - stat.find('(') - 1) + "]");
  auto user = users.find(uid);
  return json{{"pid", pid},
              {"ppid", std::stoi(fields[1])},
              {"user", user != users.end() ? user->second : std::to_string(uid)},
              {"state", fields[0]},
              {"rss_bytes", rss},
              {"cpu_s", cpu},
              {"cmdline", cmdline}};
}

Result<json> proc_list(rpc::CallContext& call) {
  rpc::ParamReader params(call.params());
  if (Status status = params.finish(); !status) return status;
  auto users = read_user_names();
  long page_size = ::sysconf(_SC_PAGESIZE);
  long ticks = ::sysconf(_SC_CLK_TCK);
  json processes = json::array();
  DIR* proc = ::opendir("/proc");
  if (!proc) return Status::from_errno(errno, "cannot read /proc");
  while (dirent* entry = ::readdir(proc)) {
    char* end = nullptr;
    long pid = std::strtol(entry->d_name, &end, 10);
    if (*end != '\0' || pid <= 0) continue;
    try {
      if (auto process = describe_process(static_cast<int>(pid), users, page_size, ticks)) processes.push_back(std::move(*process));
    } catch (const std::exception&) {
      // The process ended while we read it.
    }
  }
  ::closedir(proc);
  return json{{"processes", std::move(processes)}};
}

}  // namespace

void add_proc_methods(rpc::MethodRegistry& methods, ProcessLauncher& launcher, const AgentAccess& agent) {
  methods.add("proc.exec", [&launcher, agent](rpc::CallContext& call) { return proc_exec(call, launcher, agent); });
  methods.add("proc.spawn", [&launcher, agent](rpc::CallContext& call) { return proc_spawn(call, launcher, agent); });
  methods.add("proc.signal", [](rpc::CallContext& call) { return proc_signal(call); });
  methods.add("proc.list", [](rpc::CallContext& call) { return proc_list(call); });
}

}  // namespace gpubox
