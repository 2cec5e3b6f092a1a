#include "host/backends/container/container.h"

#include <cstdlib>

#include "host/backends/container/container_backend.h"
#include "host/backends/host_process_info.h"
#include "host/program_run.h"
#include "host/snapshot.h"

namespace gpubox::host {
namespace {

// A sandbox as a container of one engine (podman or docker, the backend's name).
class ContainerBackend final : public Backend {
 public:
  explicit ContainerBackend(std::string engine) : engine_(std::move(engine)) {}

  const std::string& name() const override { return engine_; }

  std::vector<BackendFlag> own_flags() const override { return {{"--image"}, {"--publish"}, {"--ready-timeout"}}; }

  // One synopsis and one help for both engines.
  std::string create_synopsis() const override {
    return "       podman|docker: [--image IMAGE] [--publish IP[:PORT]] [--ready-timeout S]\n";
  }

  std::string create_options_help() const override {
    return "  --network   podman|docker: none (loopback only, default; the agent's port is relayed) or bridge\n"
           "              (the engine's network, outbound allowed)\n"
           "  --gpu       podman|docker: all, or a number N of GPUs (docker --gpus; podman CDI nvidia.com/gpu=0..N-1)\n"
           "  --seccomp   podman|docker: the engine's default profile, or unconfined\n"
           "  --image     an image built from image/Dockerfile (default gpubox:latest)\n"
           "  --publish   where the agent's port is published on the host (default 127.0.0.1, any free port)\n";
  }

  Status check_flags(const Args& flags) const override {
    ContainerSandboxSpec spec;
    return parse_container_flags(flags, true, &spec);
  }

  Status check_create(const CreateRequest& request) const override {
    if (request.network != "none" && request.network != "bridge") {
      return Status::invalid_request("--network: expected none or bridge, got '" + request.network + "'");
    }
    if (request.user_namespace) return Status::invalid_request("--userns: only with the local backend (an engine maps users itself)");
    for (const auto& mount : request.mounts) {
      // Where the agent's config is mounted (container_backend.h).
      if (mount.target == "/run/gpubox-config" || mount.target.rfind("/run/gpubox-config/", 0) == 0) {
        return Status::invalid_request("--mount: the sandbox path '" + mount.target + "' is reserved");
      }
    }
    return Status::ok();
  }

  Result<SandboxRecord> create(SandboxStore& store, const CreateRequest& request) const override {
    ContainerSandboxSpec box;
    box.engine = engine_;
    if (Status flags = parse_container_flags(*request.flags, true, &box); !flags) return flags;
    box.seccomp_unconfined = request.seccomp_unconfined;
    box.name = request.name;
    box.agent_config = request.agent_config;
    box.limits = request.limits;
    box.network = request.network;
    box.mounts = request.mounts;
    box.public_spec = request.public_spec;
    box.public_spec["gpu"] = box.gpus;
    box.public_spec["publish"] = box.publish_ip + ":" + std::to_string(box.publish_port);
    return create_container_sandbox(store, box);
  }

  std::vector<std::string> unsnapshotted_spec_keys() const override {
    return {"relay", "container", "server_key", "limits_enforced_by"};
  }

  // The committed image is the snapshot's files.
  void add_snapshot_create_args(const Snapshot& snapshot, std::vector<std::string>* args) const override {
    if (snapshot.kind == "image") args->insert(args->end(), {"--image", snapshot.image});
  }

  // `ENGINE commit`: the container's file system as localhost/gpubox-snapshot:NAME.
  Status take_snapshot(const SandboxStore&, const SandboxRecord& record, Snapshot* snapshot) const override {
    std::string engine = record.spec.value("engine", record.backend);
    snapshot->kind = "image";
    snapshot->image = "localhost/gpubox-snapshot:" + snapshot->name;
    auto committed = run_program(engine, {"commit", record.spec.value("container", container_name(record.id)), snapshot->image},
                                std::chrono::minutes(30));
    if (!committed) return committed.status();
    if (committed->status != 0) return Status(ErrorCode::internal, engine + " commit: " + committed->error_line());
    auto size = run_program(engine, {"image", "inspect", "--format", "{{.Size}}", snapshot->image});
    if (size && size->status == 0) snapshot->size_bytes = std::strtoull(size->out.c_str(), nullptr, 10);
    return Status::ok();
  }

  Status remove_snapshot(const Snapshot& snapshot) const override {
    if (snapshot.image.empty()) return Status::ok();
    auto removed = run_program(snapshot.backend, {"rmi", "--force", snapshot.image});
    if (removed && removed->status != 0 && removed->err.find("image not known") == std::string::npos &&
        removed->err.find("No such image") == std::string::npos) {
      return Status(ErrorCode::internal, snapshot.backend + " rmi " + snapshot.image + ": " + removed->error_line());
    }
    return Status::ok();
  }

  Status terminate(const SandboxStore& store, const SandboxRecord& record, std::chrono::milliseconds grace,
                   bool* killed) const override {
    return terminate_container_sandbox(store, record, grace, killed);
  }

  // Podman's agents write their exit record where only they can (host_dir());
  // a docker container's record is in a dir its code can write, so the engine is asked.
  SandboxEnd end(const SandboxRecord& record) const override {
    return agent_files_private(record) ? sandbox_end_on_host(record) : container_end(record);
  }

  AgentLogSource agent_log_source(const SandboxRecord& record) const override {
    return agent_files_private(record) ? AgentLogSource::host_file : AgentLogSource::engine;
  }

  std::vector<std::string> engine_log_command(const SandboxRecord& record, bool follow) const override {
    std::vector<std::string> command = {record.spec.value("engine", record.backend), "logs"};
    if (follow) command.push_back("--follow");
    command.push_back(record.spec.value("container", container_name(record.id)));
    return command;
  }

  std::vector<InfoLine> describe(const SandboxRecord& record, const nlohmann::json&) const override {
    std::vector<InfoLine> lines = describe_host_process(record);
    const auto& network = record.spec.value("network", nlohmann::json("none"));
    lines.push_back({"isolation:", engine_ + "'s own: its namespaces and default capabilities; network " +
                                       (network.is_string() ? network.get<std::string>() : network.dump())});
    lines.push_back(seccomp_line(record, engine_ + "'s default profile"));
    return lines;
  }

  // --gpu all, or a number of GPUs (docker --gpus N).
  GpuAsk gpus_asked(const CreateRequest& request) const override {
    auto gpu = request.flags ? request.flags->last("--gpu") : std::nullopt;
    if (!gpu || *gpu == "all") return Backend::gpus_asked(request);
    auto count = parse_number(*gpu, 1, 64);
    return {"", count.value_or(0)};
  }

  void add_requested(const SandboxRecord& record, nlohmann::json* requested) const override {
    add_requested_on_host(record, requested);
  }

 private:
  static bool agent_files_private(const SandboxRecord& record) { return record.spec.value("agent_files_private", false); }

  const std::string engine_;
};

}  // namespace

const Backend& podman_backend() {
  static const ContainerBackend backend("podman");
  return backend;
}

const Backend& docker_backend() {
  static const ContainerBackend backend("docker");
  return backend;
}

}  // namespace gpubox::host
