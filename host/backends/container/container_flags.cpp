// The flags `gpubox create` has only for the podman and docker backends.
#include <regex>

#include "host/backends/container/container_backend.h"
#include "host/backends/create_flags.h"

namespace gpubox::host {
namespace {

// --publish IP[:PORT]: an IPv4 address and a port (0 or none: any free one).
bool parse_publish(const std::string& text, std::string* ip, std::uint16_t* port) {
  static const std::regex kPublish(
      "((25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])(\\.(25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])){3})(:([0-9]{1,5}))?");
  std::smatch match;
  if (!std::regex_match(text, match, kPublish)) return false;
  long value = match[6].matched ? std::stol(match[6].str()) : 0;
  if (value > 65535) return false;
  *ip = match[1].str();
  *port = static_cast<std::uint16_t>(value);
  return true;
}

}  // namespace

Status parse_container_flags(const Args& args, bool container, ContainerSandboxSpec* spec) {
  for (const char* flag : {"--image", "--publish", "--ready-timeout"}) {
    if (!container && args.last(flag)) return Status::invalid_request(std::string(flag) + ": only with --backend podman or docker");
  }
  if (Status image = read_image_flag(args, &spec->image); !image) return image;
  if (auto publish = args.last("--publish"); publish && !parse_publish(*publish, &spec->publish_ip, &spec->publish_port)) {
    return Status::invalid_request("--publish: expected IPv4[:PORT] (PORT 0-65535; 0 or none: any free port), got '" + *publish + "'");
  }
  if (auto gpu = args.last("--gpu"); gpu && container) {
    auto count = parse_number(*gpu, 1, 64);
    if (*gpu != "all" && (!count || gpu->find_first_not_of("0123456789") != std::string::npos)) {
      return Status::invalid_request("--gpu: expected all or a number of GPUs from 1 to 64, got '" + *gpu + "'");
    }
    spec->gpus = *gpu;
  }
  return read_ready_timeout_flag(args, 0.1, &spec->ready_timeout);
}

}  // namespace gpubox::host
