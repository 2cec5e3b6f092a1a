#include "host/backends/python_module.h"

#include <unistd.h>

#include <cstdlib>

#include "host/program_run.h"

namespace gpubox::host {
namespace {

// The checkout's python, when this CLI runs from its build/bin: the
// modules are found there without installing the package.
std::string checkout_python_dir() {
  char self[4096];
  ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return "";
  std::string exe(self, static_cast<size_t>(n));
  std::string dir = exe.substr(0, exe.rfind('/')) + "/../../python";
  return ::access((dir + "/gpubox/__init__.py").c_str(), R_OK) == 0 ? dir : "";
}

void add_checkout_to_python_path() {
  static bool done = false;
  if (done) return;
  done = true;
  std::string dir = checkout_python_dir();
  if (dir.empty()) return;
  const char* current = std::getenv("PYTHONPATH");
  std::string value = current && *current ? std::string(current) + ":" + dir : dir;
  ::setenv("PYTHONPATH", value.c_str(), 1);
}

}  // namespace

std::string backend_python() {
  const char* given = std::getenv("GPUBOX_PYTHON");
  return given && *given ? given : "python3";
}

Result<nlohmann::json> call_python_module(const PythonModule& module, const std::string& command,
                                          const nlohmann::json& request, std::chrono::milliseconds timeout) {
  add_checkout_to_python_path();
  std::string python = backend_python();
  std::string input = request.dump();
  auto ran = run_program(python, {"-m", module.module, command}, timeout, &input);
  if (!ran) {
    if (ran.status().code() == ErrorCode::invalid_request) {
      return Status(ErrorCode::invalid_request, "--backend " + module.backend + " needs Python with " + module.sdk + ": '" + python + "' was not found (set GPUBOX_PYTHON)");
    }
    return ran.status();
  }
  std::string line = ran->out;
  while (!line.empty() && (line.back() == '\n' || line.back() == ' ')) line.pop_back();
  line = line.substr(line.rfind('\n') == std::string::npos ? 0 : line.rfind('\n') + 1);
  auto result = nlohmann::json::parse(line, nullptr, false);
  if (!result.is_object()) {
    std::string why = ran->error_line();
    if (why.find("ModuleNotFoundError") != std::string::npos) {  // gpubox or its pyzmq/msgpack
      return Status(ErrorCode::invalid_request, "--backend " + module.backend + ": " + python + " cannot run " + module.module +
                                                    " (" + why + "): " + module.install +
                                                    ", or set GPUBOX_PYTHON to a Python that has it");
    }
    return Status(ErrorCode::internal, "the " + module.backend + " backend (" + python + " -m " + module.module + " " + command +
                                           ") failed: " + why);
  }
  if (result.contains("error")) {
    const auto& error = result["error"];
    std::string message = error.value("message", "failed");
    return Status(error.value("code", "") == "usage" ? ErrorCode::invalid_request : ErrorCode::unavailable, message);
  }
  return result;
}

}  // namespace gpubox::host
