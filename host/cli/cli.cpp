#include "host/cli/cli.h"

#include <cstdio>

#include "base/terminal_text.h"
#include "host/backends/registry.h"
#include "host/sandbox_keys.h"
#include "host/sandbox_end.h"
#include "host/sandboxes/state.h"

namespace gpubox::host::cli {

Result<Args> parse_args(const std::vector<std::string>& args, const std::set<std::string>& with_value,
                        const std::set<std::string>& flag_names, size_t stop_after) {
  Args parsed;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") {
      parsed.has_double_dash = true;
      parsed.command.assign(args.begin() + static_cast<long>(i) + 1, args.end());
      break;
    }
    if (arg.size() > 1 && arg[0] == '-') {
      std::string name = arg, value;
      bool inline_value = false;
      if (auto eq = arg.find('='); arg.rfind("--", 0) == 0 && eq != std::string::npos) {
        name = arg.substr(0, eq);
        value = arg.substr(eq + 1);
        inline_value = true;
      }
      if (name == "-h") name = "--help";
      if (name == "--json" || name == "--help" || flag_names.count(name)) {
        if (inline_value) return Status(ErrorCode::invalid_request, name + ": takes no value");
        parsed.flags.insert(name);
        continue;
      }
      if (with_value.count(name)) {
        if (!inline_value) {
          if (i + 1 >= args.size()) return Status(ErrorCode::invalid_request, name + ": expected a value");
          value = args[++i];
        }
        parsed.values[name].push_back(value);
        continue;
      }
      return Status(ErrorCode::invalid_request, arg + ": unknown option");
    }
    if (stop_after > 0 && parsed.positional.size() >= stop_after) {
      parsed.command.assign(args.begin() + static_cast<long>(i), args.end());
      break;
    }
    parsed.positional.push_back(arg);
  }
  return parsed;
}

namespace {

bool g_json_errors = false;
// The sandbox the command is about, as the user named it (for messages).
std::string g_sandbox_label = "ID";

void replace_all(std::string& text, const std::string& from, const std::string& to) {
  for (std::size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size())) {
    text.replace(at, from.size(), to);
  }
}

}  // namespace

void set_json_errors(bool on) { g_json_errors = on; }

std::string in_cli_words(const std::string& message) {
  std::string text = message;
  const std::string& id = g_sandbox_label;
  const std::pair<std::string, std::string> words[] = {
      {"params.job_id: ", ""},
      {"job.list", "`gpubox jobs " + id + "`"},
      {"job.wait", "`gpubox wait " + id + " JOB`"},
      {"job.ack", "`gpubox result --ack`"},
      {"job.cancel", "`gpubox cancel`"},
      {"sys.info", "`gpubox info " + id + "`"},
      {"sys.shutdown", "`gpubox terminate " + id + "`"},
      {"sys.heartbeat", "heartbeats"},
      {"fs.list lists it", "`gpubox get` copies a directory"},
      {"(model.list shows the loaded ones)", "(`gpubox model " + id + " ls` shows the loaded ones)"},
      {"model.hooks lists them", "`gpubox model " + id + " hooks MODEL` lists them"},
      {"params.ops[", "op ["},
      {"params.", ""},
  };
  for (const auto& [from, to] : words) replace_all(text, from, to);
  return text;
}

namespace {

// Prints one error: JSON with error_code on stdout, or the text on stderr.
int report_error(const std::string& command, std::string error_code, const std::string& message, int code,
                 bool see_help) {
  std::string text = in_cli_words(message);
  if (g_json_errors) {
    nlohmann::json error = {{"error", {{"code", error_code}, {"message", text}, {"command", command}, {"exit_code", code}}}};
    std::printf("%s\n", error.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    std::fflush(stdout);
    return code;
  }
  // Messages carry what others wrote (an agent's error, a sandbox's name): nothing in them acts on the terminal.
  std::fprintf(stderr, "gpubox %s: %s\n", command.c_str(), escape_for_terminal(text, true).c_str());
  // The one line, and where the usage is (as docker does): not 20 lines of usage that bury it.
  if (see_help) std::fprintf(stderr, "See 'gpubox %s --help'.\n", command.c_str());
  return code;
}

// fail() for a message, with or without the line that points at --help.
int fail_message(const std::string& command, const std::string& message, int code, bool see_help) {
  // "not_found: ..." (a Status's to_string) carries its code.
  if (auto colon = message.find(": "); colon != std::string::npos && error_code_from_name(message.substr(0, colon))) {
    return report_error(command, message.substr(0, colon), g_json_errors ? message.substr(colon + 2) : message, code,
                        see_help);
  }
  std::string error_code = code == kExitUsage ? "usage" : code == kExitUnreachable ? "unreachable" : "failed";
  return report_error(command, error_code, message, code, see_help);
}

// fail() for a Status, the same.
int fail_status(const std::string& command, const Status& status, int code, bool see_help) {
  // A refused flag or value is a usage error; a sandbox or name not found keeps its own code.
  bool usage_error = code == kExitUsage && status.code() == ErrorCode::invalid_request;
  return report_error(command, usage_error ? "usage" : std::string(error_code_name(status.code())), status.message(), code,
                      see_help);
}

}  // namespace

int fail(const std::string& command, const std::string& message, int code) {
  return fail_message(command, message, code, false);
}

int fail(const std::string& command, const Status& status, int code) { return fail_status(command, status, code, false); }

int fail_usage(const std::string& command, const std::string& message) {
  return fail_message(command, message, kExitUsage, true);
}

int fail_usage(const std::string& command, const Status& status) { return fail_status(command, status, kExitUsage, true); }

int fail_budget(const std::string& command, const Status& status) {
  constexpr std::string_view kExceeded = "budget_exceeded: ";
  if (status.code() == ErrorCode::resource_exhausted && status.message().rfind(kExceeded, 0) == 0) {
    return report_error(command, "budget_exceeded", status.message().substr(kExceeded.size()), kExitFailed, false);
  }
  if (status.code() == ErrorCode::invalid_request) return report_error(command, "usage", status.message(), kExitUsage, false);
  return report_error(command, std::string(error_code_name(status.code())), status.message(), kExitFailed, false);
}

int show_usage(const char* usage) {
  std::fputs(usage, stdout);
  return kExitOk;
}

int exit_code_for(const Status& status) {
  switch (status.code()) {
    case ErrorCode::invalid_request:
    case ErrorCode::not_found:
    case ErrorCode::already_exists:
      return kExitUsage;
    case ErrorCode::unavailable:
      return kExitUnreachable;
    default:
      return kExitFailed;
  }
}

Result<SandboxRecord> find_sandbox(const std::string& id_or_name) {
  auto store = SandboxStore::open_default();
  if (!store) return store.status();
  auto record = store->resolve(id_or_name);
  if (record) g_sandbox_label = id_or_name;
  return record;
}

Result<SandboxRecord> find_sandbox_with_state(const std::string& command, const std::string& id_or_name) {
  auto record = find_sandbox(id_or_name);
  if (!record || control_plane_of(*record).empty()) return record;
  auto store = SandboxStore::open_default();
  Status refreshed = store ? refresh_sandbox_state(*store, &*record) : store.status();
  if (!refreshed) {
    std::fprintf(stderr, "gpubox %s: %s's state could not be read: %s\n", command.c_str(), control_plane_of(*record).c_str(),
                 escape_for_terminal(refreshed.message(), true).c_str());
  }
  return record;
}

Result<std::unique_ptr<rpc::Client>> connect_sandbox(const SandboxRecord& record) {
  std::string state = sandbox_state(record);
  if (state == "dead") {
    return Status(ErrorCode::unavailable, "sandbox " + record.id + " is dead: " + sandbox_end(record).message +
                                              "; `gpubox terminate " + record.id + "` removes it");
  }
  if (state != "running") return Status(ErrorCode::unavailable, "sandbox " + record.id + " is " + state);
  auto options = client_options_for(record);
  if (!options) return options.status();
  options->connect_timeout = std::chrono::milliseconds(5'000);
  auto client = rpc::Client::connect(*options);
  if (!client) {
    // A sandbox run elsewhere ended when its control plane says so.
    SandboxRecord latest = record;
    auto store = SandboxStore::open_default();
    if (!control_plane_of(record).empty() && store && refresh_sandbox_state(*store, &latest) && sandbox_state(latest) == "dead") {
      return Status(ErrorCode::unavailable, "sandbox " + record.id + " is dead: " + sandbox_end(latest).message +
                                                "; `gpubox terminate " + record.id + "` removes it");
    }
    return Status(ErrorCode::unavailable, "sandbox " + record.id + " does not answer: " + client.status().message());
  }
  return client;
}

std::string remote_path(const std::string& path) {
  if (!path.empty() && path[0] == '/') return path;
  if (path.empty() || path == ".") return kSandboxWorkDir;
  return std::string(kSandboxWorkDir) + "/" + (path.rfind("./", 0) == 0 ? path.substr(2) : path);
}

}  // namespace gpubox::host::cli
