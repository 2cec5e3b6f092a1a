// The Kubernetes backend: a sandbox is an agent-sandbox Sandbox (or a
// SandboxClaim on a warm pool) of the gpubox image whose PID 1 is the agent,
// reached at its pod's IP on the agent's port with CURVE. The cluster steps
// (create, terminate, state, remote list, adopt) run in Python through the
// official Kubernetes client: `PYTHON -m gpubox.kubernetes_backend CMD`
// (python/gpubox/kubernetes_backend.py, run as host/backends/python_module.h
// says). The agent's config, its keys included, reaches the pod as a
// Kubernetes Secret mounted as a file (docs/kubernetes.md). One thread; forks.
#pragma once

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "host/args.h"
#include "host/backends/backend.h"
#include "host/sandbox_store.h"
#include "base/status.h"

namespace gpubox::host {

// The backend's name, as records keep it (kubernetes.h registers it).
inline constexpr char kKubernetesBackend[] = "kubernetes";

struct KubernetesVolume {
  std::string claim;  // a PersistentVolumeClaim of the namespace
  std::string path;   // where it is mounted in the sandbox
};

struct KubernetesSandboxSpec {
  std::string context;               // the kubeconfig's context; "": its current one
  std::string namespace_name = "default";
  std::string image = "gpubox:latest";
  std::string warm_pool;             // claim a sandbox of this SandboxWarmPool instead of creating one
  std::string queue;                 // Kueue's LocalQueue (the pod's kueue.x-k8s.io/queue-name label)
  int gpus = 0;                      // nvidia.com/gpu limits
  double cpu = 0;                    // 0: the cluster's default
  std::uint64_t memory_mib = 0;
  double timeout_s = 0;              // the Sandbox's shutdownTime from now, and the agent's deadline; 0: none
  std::vector<KubernetesVolume> volumes;
  std::string name;
  std::chrono::milliseconds ready_timeout{300'000};
  nlohmann::json agent_config = nlohmann::json::object();  // secrets included; travels as a Secret
  nlohmann::json public_spec = nlohmann::json::object();
};

// The Kubernetes flags of `gpubox create` (--context, --namespace, --warm-pool, --queue, and its readings
// of --image, --gpu, --volume, --ready-timeout) into *spec; invalid_request naming the flag.
Status parse_kubernetes_flags(const Args& args, KubernetesSandboxSpec* spec);

// Runs `PYTHON -m gpubox.kubernetes_backend COMMAND` with request on stdin (python_module.h).
Result<nlohmann::json> kubernetes_call(const std::string& command, const nlohmann::json& request,
                                       std::chrono::milliseconds timeout = std::chrono::seconds(120));

// The request fields naming where a record's sandbox is: context, namespace, kind, kubernetes_id, secret.
nlohmann::json kubernetes_where(const SandboxRecord& record);

// Creates the sandbox and returns once its agent answered sys.ping at the pod's IP. On any failure
// nothing is left: the module deletes what it created and the store's record is removed.
Result<SandboxRecord> create_kubernetes_sandbox(SandboxStore& store, const KubernetesSandboxSpec& spec);

// Asks the agent to shut down (jobs staged, outputs persisted), waits up to grace plus a margin for
// the pod to end, then deletes the Sandbox (or claim) and its Secret and removes the record.
Status terminate_kubernetes_sandbox(const SandboxStore& store, const SandboxRecord& record,
                                    std::chrono::milliseconds grace, bool* killed);

// Records a running sandbox gpubox created elsewhere, once its agent answers with these keys.
Result<SandboxRecord> adopt_kubernetes_sandbox(SandboxStore& store, const AdoptRequest& request);

// What refresh saved last (spec.kubernetes_ended: dead); running once the cluster ran it.
std::string kubernetes_state(const SandboxRecord& record);

// Asks the cluster about the running records among these (one call per namespace and context);
// those it reports ended get spec.kubernetes_ended saved. An unreachable cluster changes nothing.
Status refresh_kubernetes_states(const SandboxStore& store, std::vector<SandboxRecord*> records);

}  // namespace gpubox::host
