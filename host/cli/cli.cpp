#include "host/cli/cli.h"

#include <cmath>
#include <cstdio>

#include "host/local_backend.h"
#include "host/sandbox_keys.h"

namespace gpubox::host::cli {

std::optional<std::string> Args::last(const std::string& option) const {
  auto found = values.find(option);
  if (found == values.end() || found->second.empty()) return std::nullopt;
  return found->second.back();
}

const std::vector<std::string>& Args::all(const std::string& option) const {
  static const std::vector<std::string> kNone;
  auto found = values.find(option);
  return found == values.end() ? kNone : found->second;
}

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

int fail(const std::string& command, const std::string& message, int code, const char* usage) {
  std::fprintf(stderr, "gpubox %s: %s\n", command.c_str(), message.c_str());
  if (usage && code == kExitUsage) std::fputs(usage, stderr);
  return code;
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
  return store->resolve(id_or_name);
}

Result<std::unique_ptr<rpc::Client>> connect_sandbox(const SandboxRecord& record) {
  std::string state = record.state();
  if (state != "running") {
    return Status(ErrorCode::unavailable, "sandbox " + record.id + " is " + state +
                                              (state == "dead" ? " (its agent exited); `gpubox terminate " + record.id +
                                                                     "` removes it"
                                                               : ""));
  }
  auto options = client_options_for(record);
  if (!options) return options.status();
  options->connect_timeout = std::chrono::milliseconds(5'000);
  auto client = rpc::Client::connect(*options);
  if (!client) {
    return Status(ErrorCode::unavailable, "sandbox " + record.id + " does not answer: " + client.status().message());
  }
  return client;
}

std::optional<double> parse_number(const std::string& text, double min, double max) {
  try {
    size_t used = 0;
    double value = std::stod(text, &used);
    if (used != text.size() || !std::isfinite(value) || value < min || value > max) return std::nullopt;
    return value;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

std::string remote_path(const std::string& path) {
  if (!path.empty() && path[0] == '/') return path;
  if (path.empty() || path == ".") return kSandboxWorkDir;
  return std::string(kSandboxWorkDir) + "/" + (path.rfind("./", 0) == 0 ? path.substr(2) : path);
}

}  // namespace gpubox::host::cli
