#include "host/backends/local/gpu_devices.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <regex>
#include <set>
#include <sstream>

namespace gpubox::host {
namespace {

// The driver's compute libraries the NVIDIA container toolkit mounts ("utility"
// and "compute" capabilities), by name up to ".so".
constexpr const char* kLibraries[] = {
    "libcuda",           "libcudadebugger",    "libnvidia-ml",        "libnvidia-ptxjitcompiler",
    "libnvidia-nvvm",    "libnvidia-gpucomp",  "libnvidia-cfg",       "libnvidia-allocator",
    "libnvidia-opencl",  "libnvidia-pkcs11",   "libnvidia-pkcs11-openssl3", "libnvidia-compiler",
    "libnvidia-fatbinaryloader", "libnvidia-tls",
};
constexpr const char* kBinaries[] = {"nvidia-smi", "nvidia-debugdump", "nvidia-persistenced", "nvidia-cuda-mps-control",
                                     "nvidia-cuda-mps-server"};
constexpr const char* kSharedNodes[] = {"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset", "nvidia-caps"};

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

std::string real_path(const std::string& path) {
  char resolved[PATH_MAX];
  return ::realpath(path.c_str(), resolved) ? resolved : "";
}

std::vector<int> host_gpus(const std::string& dev_dir) {
  std::vector<int> found;
  static const std::regex kNode("nvidia([0-9]+)");
  if (DIR* dir = ::opendir(dev_dir.c_str())) {
    while (dirent* entry = ::readdir(dir)) {
      std::cmatch match;
      if (std::regex_match(entry->d_name, match, kNode)) found.push_back(std::atoi(match[1].str().c_str()));
    }
    ::closedir(dir);
  }
  std::sort(found.begin(), found.end());
  return found;
}

std::string join(const std::vector<int>& numbers) {
  std::string text;
  for (int n : numbers) text += (text.empty() ? "" : ",") + std::to_string(n);
  return text;
}

std::string run_ldconfig() {
  for (const char* ldconfig : {"/sbin/ldconfig", "/usr/sbin/ldconfig"}) {
    if (!exists(ldconfig)) continue;
    FILE* pipe = ::popen((std::string(ldconfig) + " -p 2>/dev/null").c_str(), "r");
    if (!pipe) return "";
    std::string output;
    char buffer[4096];
    for (size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;) output.append(buffer, n);
    ::pclose(pipe);
    return output;
  }
  return "";
}

}  // namespace

std::vector<std::string> driver_libraries_in(const std::string& ldconfig_output) {
  std::set<std::string> paths;
  std::istringstream lines(ldconfig_output);
  for (std::string line; std::getline(lines, line);) {
    // "\tlibcuda.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libcuda.so.1"
    auto arrow = line.find(" => ");
    if (arrow == std::string::npos) continue;
    std::string name = line.substr(line.find_first_not_of(" \t"));
    name = name.substr(0, name.find(".so"));
    if (std::find_if(std::begin(kLibraries), std::end(kLibraries), [&](const char* l) { return name == l; }) ==
        std::end(kLibraries)) {
      continue;
    }
    paths.insert(line.substr(arrow + 4));
  }
  return {paths.begin(), paths.end()};
}

Result<GpuPlan> plan_gpus(const std::string& request, const std::string& dev_dir) {
  static const std::regex kList("[0-9]{1,4}(,[0-9]{1,4})*");
  if (request != "all" && !std::regex_match(request, kList)) {
    return Status(ErrorCode::invalid_request, "--gpu: expected all or GPU numbers such as 0,1, got '" + request + "'");
  }
  std::vector<int> present = host_gpus(dev_dir);
  if (present.empty() || !exists(dev_dir + "/nvidiactl")) {
    return Status(ErrorCode::invalid_request, "--gpu: this host has no NVIDIA GPU (no " + dev_dir + "/nvidiactl and " +
                                                  dev_dir + "/nvidia0...; is the NVIDIA driver loaded?); create without --gpu");
  }
  GpuPlan plan;
  if (request == "all") {
    plan.indices = present;
  } else {
    std::set<int> wanted;
    std::istringstream list(request);
    for (std::string number; std::getline(list, number, ',');) wanted.insert(std::atoi(number.c_str()));
    for (int gpu : wanted) {
      if (std::find(present.begin(), present.end(), gpu) == present.end()) {
        return Status(ErrorCode::invalid_request,
                      "--gpu: GPU " + std::to_string(gpu) + " is not on this host (it has " + join(present) + ")");
      }
    }
    plan.indices.assign(wanted.begin(), wanted.end());
  }
  for (const char* node : kSharedNodes) {
    if (exists(dev_dir + "/" + node)) plan.device_nodes.push_back(dev_dir + "/" + node);
  }
  for (int gpu : plan.indices) plan.device_nodes.push_back(dev_dir + "/nvidia" + std::to_string(gpu));
  std::set<std::string> files;
  for (const auto& library : driver_libraries_in(run_ldconfig())) {
    if (std::string real = real_path(library); !real.empty()) files.insert(real);
  }
  for (const char* binary : kBinaries) {
    for (const char* dir : {"/usr/bin/", "/usr/local/bin/", "/bin/"}) {
      if (std::string real = real_path(dir + std::string(binary)); !real.empty()) {
        files.insert(real);
        break;
      }
    }
  }
  plan.driver_files.assign(files.begin(), files.end());
  // Inside, the sandbox's CUDA sees only the nodes it was given, numbered from 0.
  std::vector<int> inside;
  for (size_t i = 0; i < plan.indices.size(); ++i) inside.push_back(static_cast<int>(i));
  plan.env["NVIDIA_VISIBLE_DEVICES"] = join(plan.indices);
  plan.env["CUDA_VISIBLE_DEVICES"] = join(inside);
  return plan;
}

}  // namespace gpubox::host
