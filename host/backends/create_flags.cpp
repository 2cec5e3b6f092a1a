#include "host/backends/create_flags.h"

#include <algorithm>
#include <cstdio>
#include <regex>

namespace gpubox::host {

Status read_image_flag(const Args& flags, std::string* image) {
  auto given = flags.last("--image");
  if (!given) return Status::ok();
  static const std::regex kImage("[A-Za-z0-9][A-Za-z0-9._/:@-]*");
  if (given->size() > 255 || !std::regex_match(*given, kImage)) {
    return Status::invalid_request("--image: '" + *given + "' is not an image reference ([REGISTRY/]NAME[:TAG] or NAME@sha256:DIGEST)");
  }
  *image = *given;
  return Status::ok();
}

Status read_ready_timeout_flag(const Args& flags, double min_s, std::chrono::milliseconds* timeout) {
  auto text = flags.last("--ready-timeout");
  if (!text) return Status::ok();
  auto value = parse_number(*text, min_s, 3600);
  if (!value) {
    char range[64];
    std::snprintf(range, sizeof range, "%g to 3600", min_s);
    return Status::invalid_request("--ready-timeout: expected seconds from " + std::string(range) + ", got '" + *text + "'");
  }
  *timeout = std::chrono::milliseconds(static_cast<long long>(*value * 1000));
  return Status::ok();
}

std::vector<BackendFlag> backend_flags(const std::vector<const Backend*>& backends) {
  std::vector<BackendFlag> flags;
  for (const Backend* backend : backends) {
    for (const BackendFlag& flag : backend->own_flags()) {
      bool known = std::any_of(flags.begin(), flags.end(), [&](const BackendFlag& seen) { return seen.name == flag.name; });
      if (!known) flags.push_back(flag);
    }
  }
  return flags;
}

std::vector<const Backend*> backends_defining(const std::string& flag, const std::vector<const Backend*>& backends) {
  std::vector<const Backend*> owners;
  for (const Backend* backend : backends) {
    const auto own = backend->own_flags();
    if (std::any_of(own.begin(), own.end(), [&](const BackendFlag& defined) { return defined.name == flag; })) {
      owners.push_back(backend);
    }
  }
  return owners;
}

bool takes_flag(const Backend& backend, const std::string& flag) {
  const auto own = backend.own_flags();
  const auto borrowed = backend.borrowed_flags();
  return std::any_of(own.begin(), own.end(), [&](const BackendFlag& defined) { return defined.name == flag; }) ||
         std::find(borrowed.begin(), borrowed.end(), flag) != borrowed.end();
}

Status refuse_foreign_flags(const Args& flags, const Backend& chosen, const std::vector<const Backend*>& backends) {
  for (const BackendFlag& flag : backend_flags(backends)) {
    bool given = flag.takes_value ? !flags.all(flag.name).empty() : flags.flag(flag.name);
    if (!given || takes_flag(chosen, flag.name)) continue;
    std::string owners;
    const auto defining = backends_defining(flag.name, backends);
    for (std::size_t i = 0; i < defining.size(); ++i) {
      owners += (i == 0 ? "" : i + 1 == defining.size() ? " or " : ", ") + defining[i]->name();
    }
    return Status(ErrorCode::invalid_request, flag.name + ": only with --backend " + owners);
  }
  return Status::ok();
}

}  // namespace gpubox::host
