// The flags `gpubox create` has only for the Modal backend.
#include <regex>
#include <sstream>

#include "host/backends/create_flags.h"
#include "host/backends/modal/modal_backend.h"

namespace gpubox::host {
namespace {

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> parts;
  std::stringstream stream(text);
  for (std::string part; std::getline(stream, part, separator);) parts.push_back(part);
  return parts;
}

}  // namespace

Status parse_modal_flags(const Args& args, bool modal, ModalSandboxSpec* spec) {
  for (const char* flag : {"--app", "--region", "--volume", "--modal-secret", "--tag"}) {
    if (!modal && !args.all(flag).empty()) return Status::invalid_request(std::string(flag) + ": only with --backend modal");
  }
  if (!modal) return Status::ok();
  static const std::regex kName("[A-Za-z0-9][A-Za-z0-9._-]{0,63}");
  if (auto app = args.last("--app")) {
    if (!std::regex_match(*app, kName)) return Status::invalid_request("--app: '" + *app + "' is not a Modal app name (1-64 of A-Z a-z 0-9 . _ -)");
    spec->app = *app;
  }
  if (Status image = read_image_flag(args, &spec->image); !image) return image;
  if (auto gpu = args.last("--gpu")) {
    // Modal's own form: a type, optionally :COUNT (H100, A100-80GB:2, H200:8, any).
    static const std::regex kGpu("[A-Za-z0-9][A-Za-z0-9_-]*(:[1-8])?");
    if (!std::regex_match(*gpu, kGpu)) {
      return Status::invalid_request("--gpu: expected a Modal GPU type with an optional count, such as H100, A100-80GB:2 or any, got '" + *gpu + "'");
    }
    spec->gpu = *gpu;
  }
  if (auto region = args.last("--region")) {
    static const std::regex kRegions("[a-z0-9-]+(,[a-z0-9-]+)*");
    if (!std::regex_match(*region, kRegions)) return Status::invalid_request("--region: expected Modal regions such as us-east or us-east,eu-west, got '" + *region + "'");
    spec->region = *region;
  }
  for (const auto& text : args.all("--volume")) {
    auto colon = text.find(':');
    std::string name = text.substr(0, colon), path = colon == std::string::npos ? "" : text.substr(colon + 1);
    if (!std::regex_match(name, kName) || path.empty() || path[0] != '/' || path == "/" || path.rfind("/run/gpubox", 0) == 0) {
      return Status::invalid_request("--volume: expected NAME:/absolute/path (a Modal Volume, created when missing), got '" + text + "'");
    }
    spec->volumes.push_back({name, path});
  }
  for (const auto& name : args.all("--modal-secret")) {
    if (!std::regex_match(name, kName)) return Status::invalid_request("--modal-secret: '" + name + "' is not a Modal secret name");
    spec->modal_secrets.push_back(name);
  }
  for (const auto& pair : args.all("--tag")) {
    auto eq = pair.find('=');
    if (eq == std::string::npos || eq == 0 || pair.substr(0, eq) == "gpubox.sandbox" || pair.substr(0, eq) == kReservationTag) {
      return Status::invalid_request("--tag: expected KEY=VALUE (KEY not gpubox.sandbox or gpubox.reservation, which gpubox sets), got '" + pair + "'");
    }
    spec->tags[pair.substr(0, eq)] = pair.substr(eq + 1);
  }
  std::string network = args.last("--network").value_or("none");
  if (network == "none" || network == "open") {
    spec->network = network;
  } else if (network.rfind("allow:", 0) == 0) {
    static const std::regex kCidr("[0-9a-fA-F:.]+/[0-9]{1,3}");
    spec->network = "allow";
    for (const auto& cidr : split(network.substr(6), ',')) {
      if (!std::regex_match(cidr, kCidr)) return Status::invalid_request("--network allow: '" + cidr + "' is not a CIDR such as 10.0.0.0/8");
      spec->cidrs.push_back(cidr);
    }
    if (spec->cidrs.empty()) return Status::invalid_request("--network allow: expected allow:CIDR[,CIDR...]");
  } else {
    return Status::invalid_request("--network: expected none, open or allow:CIDR[,CIDR...] with --backend modal, got '" + network + "'");
  }
  if (Status ready = read_ready_timeout_flag(args, 1, &spec->ready_timeout); !ready) return ready;
  for (const char* flag : {"--mount", "--publish", "--pids", "--userns"}) {
    if (args.last(flag) || args.flag(flag)) {
      return Status::invalid_request(std::string(flag) + ": not with --backend modal (Modal Volumes: --volume NAME:/path)");
    }
  }
  return Status::ok();
}

}  // namespace gpubox::host
