#include "host/kernelspecs.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

namespace gpubox::host {

std::vector<std::string> kernelspec_dirs(const std::string& prefix) {
  std::vector<std::string> dirs;
  if (!prefix.empty()) dirs.push_back(prefix + "/share/jupyter/kernels");
  if (const char* data = std::getenv("JUPYTER_DATA_DIR"); data && *data) {
    dirs.push_back(std::string(data) + "/kernels");
  } else if (const char* home = std::getenv("HOME"); home && *home) {
    dirs.push_back(std::string(home) + "/.local/share/jupyter/kernels");
  }
  if (const char* path = std::getenv("JUPYTER_PATH"); path && *path) {
    std::string list = path;
    for (std::size_t at = 0; at <= list.size();) {
      std::size_t colon = std::min(list.find(':', at), list.size());
      if (colon > at) dirs.push_back(list.substr(at, colon - at) + "/kernels");
      at = colon + 1;
    }
  }
  dirs.push_back("/usr/local/share/jupyter/kernels");
  dirs.push_back("/usr/share/jupyter/kernels");
  return dirs;
}

std::vector<FoundKernelspec> find_kernelspecs(const std::vector<std::string>& dirs) {
  std::vector<FoundKernelspec> found;
  std::error_code error;
  for (const auto& kernels : dirs) {
    for (const auto& entry : std::filesystem::directory_iterator(kernels, error)) {
      std::ifstream in(entry.path() / "kernel.json");
      nlohmann::json spec = nlohmann::json::parse(in, nullptr, false);
      if (!spec.is_object() || !spec.value("argv", nlohmann::json()).is_array() || spec["argv"].size() < 2) continue;
      const auto& argv = spec["argv"];
      if (!argv[0].is_string() || !argv[1].is_string()) continue;
      std::string program = std::filesystem::path(argv[0].get<std::string>()).filename();
      if (program == "gpubox" && argv[1] == "attach" && argv.size() > 2 && argv[2].is_string()) {
        found.push_back({entry.path().filename(), entry.path(), argv[2].get<std::string>()});
      } else if (program == "gpubox-agent" && argv[1] == "kernel") {
        found.push_back({entry.path().filename(), entry.path(), ""});
      }
    }
  }
  return found;
}

std::vector<std::string> remove_sandbox_kernelspecs(const std::string& sandbox_id) {
  std::vector<std::string> removed;
  for (const auto& spec : find_kernelspecs(kernelspec_dirs(""))) {
    std::error_code error;
    if (spec.sandbox == sandbox_id && std::filesystem::remove_all(spec.dir, error) > 0 && !error) removed.push_back(spec.dir);
  }
  return removed;
}

}  // namespace gpubox::host
