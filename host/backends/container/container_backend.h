// The podman and docker backends: a sandbox is a container of an image built
// from image/Dockerfile, whose ENTRYPOINT (gpubox-agent) is its PID 1. The host
// reaches the agent on one TCP port, published on the host (127.0.0.1 by
// default), with CURVE and a fresh key pair per sandbox. The agent's config
// (its keys and the secrets included) is a file on a host tmpfs, bind-mounted
// read-only and deleted once the agent has read it, so no secret value is in
// the container's argv, environment, `inspect` or logs. The agent's state dir
// is the store's agent/ dir, bind-mounted (the container's code can write
// it). With podman the agent's log and exit record go to the store's host/
// dir instead, handed to PID 1 as a descriptor (--preserve-fds) and never
// mounted; docker hands no descriptor, so for it the host asks the engine how
// the container ended and reads the engine's log (docs/security.md).
// --network none: the container gets only loopback and a port relay
// (port_relay.h) publishes the agent's port; --network bridge: the engine's
// default network (outbound allowed) and the engine publishes the port.
// One thread; forks.
#pragma once

#include <chrono>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "host/args.h"
#include "host/backends/backend.h"
#include "host/resource_limits.h"
#include "host/sandbox_end.h"
#include "host/sandbox_store.h"
#include "base/status.h"

namespace gpubox::host {

// The image `gpubox create --backend podman|docker` runs without --image.
inline constexpr char kDefaultImage[] = "gpubox:latest";

struct ContainerSandboxSpec {
  std::string engine = "podman";  // "podman" or "docker": the CLI on PATH
  std::string image = kDefaultImage;
  std::string name;
  nlohmann::json agent_config = nlohmann::json::object();  // secrets included; never in argv
  ResourceLimits limits;           // engine limits: --cpus, --memory (no swap), --pids-limit
  std::string network = "none";    // "none" or "bridge"
  std::string publish_ip = "127.0.0.1";
  std::uint16_t publish_port = 0;  // 0: any free port
  std::string gpus;                // "", "all" or a count "N"
  bool seccomp_unconfined = false; // --security-opt seccomp=unconfined; else the engine's default profile
  std::vector<BindMount> mounts;
  std::chrono::milliseconds ready_timeout{30'000};
  nlohmann::json public_spec = nlohmann::json::object();
};

// Runs the container and waits until its agent answers over CURVE. On any
// failure the container, its relay and its state are removed, and the error
// says what the engine or the agent said (an image without the agent as its
// ENTRYPOINT, an agent that exits or never listens).
Result<SandboxRecord> create_container_sandbox(SandboxStore& store, const ContainerSandboxSpec& spec);

// Stops the container (TERM, then KILL after grace plus a second: the
// engine's stop), removes it and the sandbox's state. *killed tells whether
// KILL was needed. A container already gone is only cleaned up.
Status terminate_container_sandbox(const SandboxStore& store, const SandboxRecord& record,
                                   std::chrono::milliseconds grace, bool* killed = nullptr);

// How a container whose agent keeps no host-private exit record ended, as
// the engine recorded it (its exit code, and whether it was OOM-killed): the
// engine's word, which code in the container cannot forge.
SandboxEnd container_end(const SandboxRecord& record);

// The podman|docker flags of `gpubox create` (--image, --publish, --gpu, --ready-timeout) into *spec;
// invalid_request naming the flag, also for one given without a container backend.
Status parse_container_flags(const Args& args, bool container, ContainerSandboxSpec* spec);

// The `ENGINE run` arguments that give a container gpus ("", "all" or a count
// "N", as parse_container_flags checked it): docker's --gpus; for podman the
// CDI devices nvidia.com/gpu=all, or nvidia.com/gpu=0 … N-1.
std::vector<std::string> gpu_arguments(const std::string& engine, const std::string& gpus);

// The container's name for a sandbox id.
std::string container_name(const std::string& id);

}  // namespace gpubox::host
