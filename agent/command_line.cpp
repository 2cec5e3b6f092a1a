#include "agent/command_line.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace gpubox {

const char kUsage[] =
    "usage: gpubox-agent [options] [-- CMD ARGS...]\n"
    "       gpubox-agent keygen    print a new CURVE key pair as JSON\n"
    "       gpubox-agent kernel -f CONNECTION_FILE [--python PATH] [--plain]\n"
    "                              serve the Jupyter kernel standalone (kernelspec \"gpubox\")\n"
    "\n"
    "Runs as the init (PID 1) of a sandbox: reaps zombies, forwards signals,\n"
    "supervises the configured children and, given CMD, runs it as the main\n"
    "child and exits with its status.\n"
    "\n"
    "options:\n"
    "  --config FILE         the JSON config (docs/config.md); else $GPUBOX_CONFIG\n"
    "  --config-fd FD        read the JSON config from FD (a pipe or memfd) to its end, then close it;\n"
    "                        keeps secrets out of argv, the environment and files\n"
    "  --state-dir DIR       overrides state_dir\n"
    "  --log-level LEVEL     overrides log.level (trace debug info warn error off)\n"
    "  --grace-seconds N     overrides shutdown.grace_seconds\n"
    "  --ready-fd FD         write \"ready\\n\" to FD once ready, then close it\n"
    "  --host-dir-fd FD      an open directory only the agent reaches: its log, exit record and an\n"
    "                        ipc:// endpoint for the host go there, not into the state dir\n"
    "  --check-config        validate the config, print it as JSON (secrets redacted) and exit\n"
    "  --version             print the version and exit\n"
    "  --help                print this help and exit\n";

namespace {

Result<std::string> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::from_errno(errno, "config: cannot read '" + path + "'");
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// Reads fd to its end and closes it: the config is read once, and no child may
// inherit a descriptor that holds secrets.
Result<std::string> read_fd(int fd) {
  std::string text;
  char buffer[16384];
  while (true) {
    ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n > 0) {
      text.append(buffer, static_cast<size_t>(n));
      if (text.size() > (64u << 20)) {
        ::close(fd);
        return Status(ErrorCode::invalid_request, "config: --config-fd " + std::to_string(fd) + ": more than 64 MiB");
      }
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    int error = errno;
    ::close(fd);
    if (n < 0) return Status::from_errno(error, "config: cannot read --config-fd " + std::to_string(fd));
    return text;
  }
}

// A descriptor number flag: range first, written so that NaN fails it (casting NaN to int is undefined).
Result<int> parse_fd_flag(const std::string& flag, const std::string& text);

// A flag's number as JSON; its text as a JSON string when it is no number,
// so that validation reports exactly what was given.
nlohmann::json number_or_text(const std::string& text) {
  try {
    size_t used = 0;
    double value = std::stod(text, &used);
    if (used == text.size()) return value;
  } catch (const std::exception&) {
  }
  return text;
}

Result<int> parse_fd_flag(const std::string& flag, const std::string& text) {
  nlohmann::json fd = number_or_text(text);
  if (!fd.is_number() || !(fd.get<double>() >= 0 && fd.get<double>() <= 65535) ||
      fd.get<double>() != static_cast<int>(fd.get<double>())) {
    return Status(ErrorCode::invalid_request, flag + ": expected a file descriptor number, got \"" + text + "\"");
  }
  return static_cast<int>(fd.get<double>());
}

// `kernel -f FILE [--python PATH] [--plain]`.
Result<CommandLine> parse_kernel_command_line(const std::vector<std::string>& args) {
  CommandLine line;
  line.mode = CommandLine::Mode::kernel;
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--plain") {
      line.kernel_plain = true;
      continue;
    }
    if (arg != "-f" && arg != "--connection-file" && arg != "--python") {
      return Status(ErrorCode::invalid_request, "kernel: unknown option '" + arg + "' (expected -f FILE, --python PATH, --plain)");
    }
    if (i + 1 >= args.size() || args[i + 1].empty()) return Status(ErrorCode::invalid_request, "kernel: " + arg + ": expected a value");
    (arg == "--python" ? line.kernel_python : line.kernel_connection_file) = args[++i];
  }
  if (line.kernel_connection_file.empty()) return Status(ErrorCode::invalid_request, "kernel: -f CONNECTION_FILE is required");
  return line;
}

}  // namespace

Result<CommandLine> parse_command_line(const std::vector<std::string>& args, const char* env_config) {
  CommandLine line;
  std::string config_file;
  int config_fd = -1;
  nlohmann::json overrides = nlohmann::json::object();
  if (!args.empty() && args[0] == "keygen") {
    if (args.size() > 1) return Status(ErrorCode::invalid_request, "keygen: takes no arguments");
    line.mode = CommandLine::Mode::keygen;
    return line;
  }
  if (!args.empty() && args[0] == "kernel") return parse_kernel_command_line(args);
  size_t i = 0;
  auto value_of = [&](const std::string& flag) -> Result<std::string> {
    if (i + 1 >= args.size()) return Status(ErrorCode::invalid_request, flag + ": expected a value");
    return args[++i];
  };
  for (; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") {
      line.command.assign(args.begin() + static_cast<long>(i) + 1, args.end());
      if (line.command.empty()) return Status(ErrorCode::invalid_request, "--: expected a command after it");
      break;
    }
    if (arg == "--version") {
      line.mode = CommandLine::Mode::version;
      return line;
    }
    if (arg == "--help" || arg == "-h") {
      line.mode = CommandLine::Mode::help;
      return line;
    }
    if (arg == "--check-config") {
      line.mode = CommandLine::Mode::check_config;
      continue;
    }
    Result<std::string> value = Status(ErrorCode::invalid_request, arg + ": unknown option (see --help)");
    if (arg == "--config" || arg == "--state-dir" || arg == "--log-level" || arg == "--grace-seconds" ||
        arg == "--ready-fd" || arg == "--config-fd" || arg == "--host-dir-fd") {
      value = value_of(arg);
    }
    if (!value) return value.status();
    if (arg == "--config") {
      config_file = *value;
    } else if (arg == "--state-dir") {
      overrides["state_dir"] = *value;
    } else if (arg == "--log-level") {
      overrides["log"]["level"] = *value;
    } else if (arg == "--grace-seconds") {
      overrides["shutdown"]["grace_seconds"] = number_or_text(*value);
    } else if (arg == "--ready-fd" || arg == "--config-fd") {
      auto fd = parse_fd_flag(arg, *value);
      if (!fd) return fd.status();
      (arg == "--ready-fd" ? line.ready_fd : config_fd) = *fd;
    } else if (arg == "--host-dir-fd") {
      auto fd = parse_fd_flag(arg, *value);
      if (!fd) return fd.status();
      struct stat st {};
      if (::fstat(*fd, &st) != 0 || !S_ISDIR(st.st_mode)) {
        return Status(ErrorCode::invalid_request, arg + " " + *value + ": not an open directory");
      }
      line.host_dir_fd = *fd;
    }
  }
  if (!config_file.empty() && config_fd >= 0) {
    return Status(ErrorCode::invalid_request, "--config and --config-fd: give one of them");
  }

  std::string document_text = "{}";
  if (!config_file.empty()) {
    auto text = read_file(config_file);
    if (!text) return text.status();
    document_text = std::move(*text);
  } else if (config_fd >= 0) {
    auto text = read_fd(config_fd);
    if (!text) return text.status();
    document_text = std::move(*text);
  } else if (env_config && *env_config) {
    auto decoded = decode_config_env(env_config);
    if (!decoded) return decoded.status();
    document_text = std::move(*decoded);
  }
  std::string source = !config_file.empty() ? config_file
                       : config_fd >= 0    ? "--config-fd"
                       : (env_config && *env_config) ? "GPUBOX_CONFIG" : "flags";
  // The document is validated as given first, so a flag cannot hide a bad value it replaces.
  if (auto as_given = parse_config(document_text); !as_given) {
    return Status(ErrorCode::invalid_request, "config (" + source + "): " + as_given.status().message());
  }
  if (!overrides.empty()) {
    source = "flags";
    nlohmann::json document;
    try {
      document = nlohmann::json::parse(document_text);
    } catch (const nlohmann::json::parse_error&) {
      // parse_config below reports the error with its position.
    }
    if (document.is_object()) {
      document.merge_patch(overrides);
      document_text = document.dump();
    }
  }
  auto config = parse_config(document_text);
  if (!config) {
    return Status(ErrorCode::invalid_request, "config (" + source + "): " + config.status().message());
  }
  line.config = std::move(*config);
  return line;
}

}  // namespace gpubox
