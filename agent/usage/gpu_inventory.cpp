#include "agent/usage/gpu_inventory.h"

#include <dirent.h>

#include <algorithm>
#include <charconv>
#include <fstream>
#include <map>
#include <sstream>

namespace gpubox::usage {
namespace {

std::string trim(std::string_view text) {
  auto begin = text.find_first_not_of(" \t\r");
  if (begin == std::string_view::npos) return {};
  auto end = text.find_last_not_of(" \t\r");
  return std::string(text.substr(begin, end - begin + 1));
}

std::optional<int> small_number(std::string_view text) {
  int value = 0;
  if (text.empty() || text.size() > 6) return std::nullopt;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || value < 0) return std::nullopt;
  return value;
}

std::vector<std::string> entries(const std::string& path) {
  std::vector<std::string> names;
  DIR* dir = ::opendir(path.c_str());
  if (!dir) return names;
  while (struct dirent* entry = ::readdir(dir)) names.emplace_back(entry->d_name);
  ::closedir(dir);
  return names;
}

}  // namespace

std::optional<NvidiaGpuInfo> parse_nvidia_information(std::string_view text) {
  NvidiaGpuInfo info;
  std::size_t at = 0;
  while (at < text.size()) {
    std::size_t end = text.find('\n', at);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(at, end - at);
    at = end + 1;
    std::size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    std::string key = trim(line.substr(0, colon)), value = trim(line.substr(colon + 1));
    if (key == "Model" && !value.empty()) info.model = value;
    if (key == "Device Minor") {
      if (auto minor = small_number(value)) info.minor = *minor;
    }
  }
  if (info.model.empty() || info.minor < 0) return std::nullopt;
  return info;
}

GpuInventory probe_gpus(const std::string& dev_dir, const std::string& nvidia_gpus_dir) {
  std::vector<int> minors;
  for (const auto& name : entries(dev_dir)) {
    if (name.rfind("nvidia", 0) != 0) continue;
    if (auto minor = small_number(std::string_view(name).substr(6))) minors.push_back(*minor);  // not nvidiactl, nvidia-uvm
  }
  std::sort(minors.begin(), minors.end());
  std::map<int, std::string> model_of;
  for (const auto& bus_id : entries(nvidia_gpus_dir)) {
    if (bus_id == "." || bus_id == "..") continue;
    std::ifstream in(nvidia_gpus_dir + "/" + bus_id + "/information");
    std::ostringstream text;
    text << in.rdbuf();
    if (auto info = parse_nvidia_information(text.str().substr(0, 64 * 1024))) model_of[info->minor] = info->model;
  }
  GpuInventory inventory;
  inventory.count = static_cast<int>(minors.size());
  inventory.source = "device nodes " + dev_dir + "/nvidiaN; models from " + nvidia_gpus_dir + "/*/information";
  std::vector<std::string> distinct;
  for (int minor : minors) {
    auto model = model_of.find(minor);
    inventory.models.push_back(model == model_of.end() ? "" : model->second);
    if (model != model_of.end() && std::find(distinct.begin(), distinct.end(), model->second) == distinct.end()) {
      distinct.push_back(model->second);
    }
  }
  if (!distinct.empty()) {
    std::string joined;
    for (const auto& model : distinct) joined += (joined.empty() ? "" : ", ") + model;
    inventory.type = joined;
  }
  return inventory;
}

}  // namespace gpubox::usage
