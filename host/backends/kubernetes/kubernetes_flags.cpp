// The flags `gpubox create` has for the Kubernetes backend.
#include <regex>

#include "host/backends/create_flags.h"
#include "host/backends/kubernetes/kubernetes_backend.h"

namespace gpubox::host {

Status parse_kubernetes_flags(const Args& args, KubernetesSandboxSpec* spec) {
  // Kubernetes' own name rules: a namespace is a DNS label, other objects DNS subdomains.
  static const std::regex kLabel("[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?");
  static const std::regex kSubdomain("[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?");
  static const std::regex kLabelValue("[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?");
  if (auto context = args.last("--context")) {
    if (context->empty() || context->size() > 253 || context->find_first_of("\n\r\t") != std::string::npos) {
      return Status::invalid_request("--context: expected the name of a context of the kubeconfig");
    }
    spec->context = *context;
  }
  if (auto ns = args.last("--namespace")) {
    if (!std::regex_match(*ns, kLabel)) return Status::invalid_request("--namespace: '" + *ns + "' is not a Kubernetes namespace name (a DNS label: a-z 0-9 -, up to 63)");
    spec->namespace_name = *ns;
  }
  if (auto pool = args.last("--warm-pool")) {
    if (!std::regex_match(*pool, kSubdomain)) return Status::invalid_request("--warm-pool: '" + *pool + "' is not a SandboxWarmPool name");
    spec->warm_pool = *pool;
  }
  if (auto queue = args.last("--queue")) {
    if (!std::regex_match(*queue, kLabelValue)) return Status::invalid_request("--queue: '" + *queue + "' is not a Kueue LocalQueue name");
    spec->queue = *queue;
  }
  if (Status image = read_image_flag(args, &spec->image); !image) return image;
  if (auto gpu = args.last("--gpu")) {
    auto count = parse_number(*gpu, 0, 64);
    if (!count || *count != static_cast<double>(static_cast<int>(*count))) {
      return Status::invalid_request("--gpu: expected a number of GPUs from 0 to 64 (nvidia.com/gpu), got '" + *gpu + "'");
    }
    spec->gpus = static_cast<int>(*count);
  }
  for (const auto& text : args.all("--volume")) {
    auto colon = text.find(':');
    std::string claim = text.substr(0, colon), path = colon == std::string::npos ? "" : text.substr(colon + 1);
    if (!std::regex_match(claim, kSubdomain) || path.empty() || path[0] != '/' || path == "/" ||
        path.rfind("/run/gpubox", 0) == 0) {
      return Status::invalid_request("--volume: expected CLAIM:/absolute/path (a PersistentVolumeClaim of the namespace), got '" + text + "'");
    }
    spec->volumes.push_back({claim, path});
  }
  if (Status ready = read_ready_timeout_flag(args, 1, &spec->ready_timeout); !ready) return ready;
  for (const char* flag : {"--mount", "--publish", "--pids", "--userns", "--seccomp", "--network"}) {
    if (args.last(flag) || args.flag(flag)) {
      return Status::invalid_request(std::string(flag) + ": not with --backend kubernetes (the cluster sets the pod's network, "
                                     "security context and limits; volumes: --volume CLAIM:/path)");
    }
  }
  if (!spec->warm_pool.empty()) {
    // A pool's agents started before the claim, with the pool's config and pod template.
    for (const char* flag : {"--config", "--env", "--secret", "--idle-timeout", "--image", "--gpu", "--cpu", "--memory",
                             "--volume", "--queue"}) {
      if (args.last(flag)) {
        return Status::invalid_request(std::string(flag) + ": not with --warm-pool (its sandboxes are already running, "
                                       "made from the pool's template; set it there)");
      }
    }
  }
  return Status::ok();
}

}  // namespace gpubox::host
