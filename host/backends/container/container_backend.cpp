#include "host/backends/container/container_backend.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <thread>

#include "host/agent_files.h"
#include "host/program_run.h"
#include "host/backends/container/port_relay.h"
#include "host/sandbox_keys.h"
#include "rpc/client.h"
#include "base/fd.h"
#include "rpc/keys.h"

namespace gpubox::host {
namespace {

using Clock = std::chrono::steady_clock;

// Where the agent finds its config inside the container.
constexpr char kConfigDir[] = "/run/gpubox-config";
// PID 1's descriptor of the host-private dir (podman's --preserve-fds 1 hands fd 3).
constexpr int kPreservedHostDirFd = 3;

// Whether the agent gets a host-private dir for its log and exit record:
// podman can hand the container a descriptor (--preserve-fds), docker cannot.
bool podman_hands_host_dir(const ContainerSandboxSpec& spec) { return spec.engine == "podman"; }

std::string trimmed(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ')) text.pop_back();
  return text;
}

// A private directory on a tmpfs (the user's runtime dir, else /dev/shm)
// holding the agent's config for as long as the container needs to read it:
// the secrets in it never reach a disk. Removed with this object.
class ConfigDrop {
 public:
  ConfigDrop() = default;
  ConfigDrop(const ConfigDrop&) = delete;
  ConfigDrop& operator=(const ConfigDrop&) = delete;
  ~ConfigDrop() { remove(); }

  Status write(const std::string& text) {
    const char* runtime = std::getenv("XDG_RUNTIME_DIR");
    std::string base = runtime && *runtime == '/' && ::access(runtime, W_OK) == 0 ? runtime : "/dev/shm";
    std::string pattern = base + "/gpubox-config-XXXXXX";
    if (!::mkdtemp(pattern.data())) return Status::from_errno(errno, "cannot create a directory in " + base);
    dir_ = pattern;
    std::string path = dir_ + "/config.json";
    Fd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
    if (!fd.valid() || write_fully(fd.get(), text.data(), text.size()) != 0) {
      return Status::from_errno(errno, "cannot write '" + path + "'");
    }
    return Status::ok();
  }
  const std::string& dir() const { return dir_; }
  void remove() {
    if (dir_.empty()) return;
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
    dir_.clear();
  }

 private:
  std::string dir_;
};

// `ENGINE run` arguments for the spec; the image and the agent's arguments last.
std::vector<std::string> run_arguments(const ContainerSandboxSpec& spec, const SandboxRecord& record,
                                       const std::string& store_root, const std::string& config_dir) {
  std::string name = container_name(record.id);
  std::vector<std::string> args = {"run", "--detach", "--name", name, "--hostname",
                                   record.name.empty() ? record.id : record.name, "--label",
                                   "gpubox.sandbox=" + record.id, "--label", "gpubox.store=" + store_root};
  // Podman writes PID 1's host pid where we ask (the host-private dir), and
  // hands PID 1 that dir as its fd 3; Docker is asked with inspect and hands no fd.
  if (podman_hands_host_dir(spec)) {
    args.insert(args.end(), {"--pidfile", record.host_dir() + "/container.pid", "--preserve-fds", "1"});
  }
  if (spec.network == "none") {
    args.insert(args.end(), {"--network", "none"});
  } else {
    std::string port = spec.publish_port ? std::to_string(spec.publish_port) : "";
    args.insert(args.end(), {"--publish", spec.publish_ip + ":" + port + ":" + std::to_string(kImageAgentPort)});
  }
  args.insert(args.end(), {"--volume", config_dir + ":" + kConfigDir + ":ro", "--volume",
                           record.agent_dir() + ":" + kSandboxStateDir});
  for (const auto& mount : spec.mounts) {
    args.insert(args.end(), {"--volume", mount.source + ":" + mount.target + (mount.read_only ? ":ro" : "")});
  }
  if (spec.seccomp_unconfined) args.insert(args.end(), {"--security-opt", "seccomp=unconfined"});
  if (spec.limits.cpus > 0) args.push_back("--cpus=" + std::to_string(spec.limits.cpus));
  if (spec.limits.memory_mib > 0) {
    std::string memory = std::to_string(spec.limits.memory_mib) + "m";
    args.insert(args.end(), {"--memory=" + memory, "--memory-swap=" + memory});
  }
  if (spec.limits.pids > 0) args.push_back("--pids-limit=" + std::to_string(spec.limits.pids));
  for (auto& arg : gpu_arguments(spec.engine, spec.gpus)) args.push_back(std::move(arg));
  args.insert(args.end(), {spec.image, "--config", std::string(kConfigDir) + "/config.json"});
  if (podman_hands_host_dir(spec)) args.insert(args.end(), {"--host-dir-fd", std::to_string(kPreservedHostDirFd)});
  return args;
}

// The host pid of the container's PID 1.
Result<pid_t> container_pid(const ContainerSandboxSpec& spec, const SandboxRecord& record) {
  std::string text;
  if (podman_hands_host_dir(spec)) {
    // Podman wrote it in the host-private dir; read as any agent file, never through a link.
    auto pid_file = read_agent_file(record.host_dir(), "container.pid", 64);
    if (!pid_file) return pid_file.status();
    text = trimmed(*pid_file);
  } else {
    auto inspected = run_program(spec.engine, {"inspect", "--format", "{{.State.Pid}}", container_name(record.id)});
    if (!inspected) return inspected.status();
    text = trimmed(inspected->out);
  }
  char* end = nullptr;
  long pid = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || pid <= 1) {
    return Status(ErrorCode::internal, "the engine did not say the container's pid (got '" + text + "')");
  }
  return static_cast<pid_t>(pid);
}

// The host address the engine published the agent's port on.
Result<std::string> published_address(const ContainerSandboxSpec& spec, const std::string& name) {
  auto port = run_program(spec.engine, {"port", name, std::to_string(kImageAgentPort) + "/tcp"});
  if (!port) return port.status();
  std::string line = trimmed(port->out);
  line = line.substr(0, line.find('\n'));
  if (port->status != 0 || line.find(':') == std::string::npos) {
    return Status(ErrorCode::internal, "the engine did not publish the agent's port: " + port->error_line());
  }
  if (line.rfind("0.0.0.0:", 0) == 0) line = "127.0.0.1" + line.substr(7);
  return line;
}

// What the engine still says about a container that stopped: its exit code and log tail.
std::string why_it_ended(const std::string& engine, const std::string& name) {
  std::string why;
  // The engine records the exit code a moment after the process ends (conmon's
  // exit file): until the state says exited, the code it shows is still 0.
  for (int attempt = 0; attempt < 30; ++attempt) {
    auto state = run_program(engine, {"inspect", "--format", "{{.State.Status}} {{.State.ExitCode}}", name},
                            std::chrono::seconds(10));
    if (!state || state->status != 0) break;
    std::string text = trimmed(state->out);
    if (text.rfind("exited ", 0) == 0 || text.rfind("stopped ", 0) == 0 || attempt == 29) {
      why = "exited with status " + text.substr(text.find(' ') + 1);
      break;
    }
    ::usleep(100'000);
  }
  auto logs = run_program(engine, {"logs", "--tail", "5", name}, std::chrono::seconds(10));
  if (logs && logs->status == 0) {
    std::string text = trimmed(logs->out + logs->err);
    if (!text.empty()) why += (why.empty() ? "" : ": ") + text;
  }
  return why.empty() ? "ended" : why;
}

const char kImageHint[] =
    " (the image needs gpubox-agent as its ENTRYPOINT: build it from image/Dockerfile; see image/README.md)";

// The error for an agent that ended before it was ready (when: "at its start"...),
// with what the engine says of it.
Status agent_ended(const std::string& engine, const std::string& name, const std::string& when) {
  return Status(ErrorCode::invalid_request, "the container's agent " + why_it_ended(engine, name) + " " + when + kImageHint);
}

// Waits until the agent completes a CURVE handshake, or exits, or the time is up.
Status await_agent(const ContainerSandboxSpec& spec, const SandboxRecord& record, const ProcessIdentity& agent) {
  auto options = client_options_for(record);
  if (!options) return options.status();
  auto deadline = Clock::now() + spec.ready_timeout;
  while (true) {
    if (!process_alive(agent)) return agent_ended(spec.engine, container_name(record.id), "before it was ready");
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) {
      return Status(ErrorCode::unavailable, "the container's agent did not answer on " + record.endpoint + " within " +
                                                std::to_string(spec.ready_timeout.count()) + " ms" + kImageHint);
    }
    options->connect_timeout = std::min(left, std::chrono::milliseconds(250));
    auto client = rpc::Client::connect(*options);
    if (client) return Status::ok();
    if (client.status().code() == ErrorCode::permission_denied) return client.status();
  }
}

// Removes a container whatever its state, without waiting for a stop timeout.
std::vector<std::string> force_remove(const std::string& engine, const std::string& name) {
  if (engine == "podman") return {"rm", "--force", "--time", "0", name};
  return {"rm", "--force", name};
}

void kill_relay(const SandboxRecord& record) {
  const auto& relay = record.spec.value("relay", nlohmann::json::object());
  ProcessIdentity identity{relay.value("pid", 0), relay.value("start_time", std::uint64_t{0})};
  if (identity.pid > 0 && process_alive(identity)) ::kill(identity.pid, SIGKILL);
}

}  // namespace

std::vector<std::string> gpu_arguments(const std::string& engine, const std::string& gpus) {
  if (gpus.empty()) return {};
  if (engine == "docker") return {"--gpus", gpus};
  if (gpus == "all") return {"--device", "nvidia.com/gpu=all"};
  // CDI names devices, it does not count them: N GPUs are devices 0 … N-1.
  std::vector<std::string> args;
  for (int index = 0; index < std::stoi(gpus); ++index) {
    args.insert(args.end(), {"--device", "nvidia.com/gpu=" + std::to_string(index)});
  }
  return args;
}

std::string container_name(const std::string& id) { return "gpubox-" + id; }

Result<SandboxRecord> create_container_sandbox(SandboxStore& store, const ContainerSandboxSpec& spec) {
  if (!program_on_path(spec.engine)) {
    return Status(ErrorCode::invalid_request, "--backend " + spec.engine + ": '" + spec.engine + "' was not found on PATH");
  }
  auto server_keys = rpc::generate_keypair();
  auto client_keys = rpc::generate_keypair();
  if (!server_keys) return server_keys.status();
  if (!client_keys) return client_keys.status();
  nlohmann::json public_spec = spec.public_spec;
  public_spec["engine"] = spec.engine;
  public_spec["image"] = spec.image;
  public_spec["server_key"] = server_keys->public_key;
  auto reserved = store.reserve(spec.name, public_spec);
  if (!reserved) return reserved.status();
  SandboxRecord record = std::move(*reserved);
  record.backend = spec.engine;
  std::string name = container_name(record.id);
  record.spec["container"] = name;
  std::string by = "engine (" + spec.engine + " run ";
  record.spec["limits_enforced_by"] = {
      {"cpu", spec.limits.cpus > 0 ? by + "--cpus)" : "not limited"},
      {"memory", spec.limits.memory_mib > 0 ? by + "--memory, no swap)" : "not limited"},
      {"pids", spec.limits.pids > 0 ? by + "--pids-limit)" : "not limited"}};
  ::rmdir(record.work_dir().c_str());  // the work dir is the container's own /workspace
  bool started = false;
  auto fail = [&](Status status) -> Status {
    kill_relay(record);
    if (started) (void)run_program(spec.engine, force_remove(spec.engine, name), std::chrono::seconds(30));
    (void)store.remove(record);
    return status;
  };
  if (Status saved = save_client_keys(record, *client_keys); !saved) return fail(saved);

  nlohmann::json config = spec.agent_config;
  config["state_dir"] = kSandboxStateDir;
  config["seccomp"] = {{"profile", "unconfined"}};  // the engine's profile filters the whole container
  config["rpc"]["endpoints"] = {"tcp://0.0.0.0:" + std::to_string(kImageAgentPort)};
  config["rpc"]["secret_key"] = server_keys->secret_key;
  config["rpc"]["authorized_keys"] = {client_keys->public_key};
  ConfigDrop drop;
  if (Status written = drop.write(config.dump()); !written) return fail(written);
  // The agent's log and exit record (and podman's pid file) go to host_dir():
  // never mounted in the container, PID 1 reaches it through its fd 3 alone,
  // and nothing else in the container can (PID 1 is not dumpable: docs/security.md).
  Fd host_dir;
  if (podman_hands_host_dir(spec)) {
    if (::mkdir(record.host_dir().c_str(), 0700) != 0) {
      return fail(Status::from_errno(errno, "cannot create '" + record.host_dir() + "'"));
    }
    host_dir = Fd(::open(record.host_dir().c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!host_dir.valid()) return fail(Status::from_errno(errno, "cannot open '" + record.host_dir() + "'"));
    record.spec["agent_files_private"] = true;
  }

  started = true;  // from here a failed run may still have left a container
  auto ran = run_program(spec.engine, run_arguments(spec, record, store.root(), drop.dir()), std::chrono::seconds(120),
                         nullptr, host_dir.get());
  if (!ran) return fail(ran.status());
  if (ran->status != 0) {
    std::string why = ran->error_line();
    bool image_problem = why.find("executable file") != std::string::npos || why.find("no command") != std::string::npos;
    bool no_image = why.find("image not known") != std::string::npos || why.find("manifest unknown") != std::string::npos ||
                    why.find("Unable to find image") != std::string::npos || why.find("pull access denied") != std::string::npos ||
                    why.find("short-name") != std::string::npos || why.find("initializing source") != std::string::npos;
    std::string hint = image_problem ? kImageHint : no_image ? " (no such image here: build it from image/Dockerfile)" : "";
    return fail(Status(image_problem || no_image ? ErrorCode::invalid_request : ErrorCode::internal,
                       spec.engine + " run " + spec.image + ": " + why + hint));
  }
  auto pid = container_pid(spec, record);
  if (!pid) return fail(pid.status());
  auto start_time = process_start_time(*pid);
  if (!start_time) return fail(agent_ended(spec.engine, name, "at its start"));
  record.agent = {*pid, *start_time};
  // An agent that ends while its port is set up fails that setup: its network
  // namespace goes early in its exit, before its process shows as ended (so a
  // moment is given for that). Then the agent's end is what the caller needs to hear.
  auto port_failed = [&](Status status) {
    for (int attempt = 0; attempt < 20; ++attempt) {
      if (!process_alive(record.agent)) return fail(agent_ended(spec.engine, name, "at its start"));
      ::usleep(100'000);
    }
    return fail(std::move(status));
  };

  if (spec.network == "none") {
    auto relay = start_port_relay(*pid, spec.publish_ip, spec.publish_port, kImageAgentPort);
    if (!relay) return port_failed(relay.status());
    record.spec["relay"] = {{"pid", relay->relay.pid}, {"start_time", relay->relay.start_time}};
    record.endpoint = "tcp://" + spec.publish_ip + ":" + std::to_string(relay->port);
  } else {
    auto address = published_address(spec, name);
    if (!address) return port_failed(address.status());
    record.endpoint = "tcp://" + *address;
  }
  if (Status saved = store.save(record); !saved) return fail(saved);
  Status ready = await_agent(spec, record, record.agent);
  drop.remove();  // read by now (or never to be): the secrets leave the host's tmpfs
  if (!ready) return fail(ready);
  return record;
}

SandboxEnd container_end(const SandboxRecord& record) {
  std::string engine = record.spec.value("engine", record.backend);
  std::string name = record.spec.value("container", container_name(record.id));
  SandboxEnd end;
  end.reason = "agent_crashed";
  // The engine records the exit a moment after the process ends: until it says exited, its code is not final.
  std::string state;
  for (int attempt = 0; attempt < 30; ++attempt) {
    auto inspected = run_program(engine, {"inspect", "--format", "{{.State.Status}} {{.State.ExitCode}} {{.State.OOMKilled}}", name},
                                 std::chrono::seconds(10));
    if (!inspected || inspected->status != 0) {
      end.message = "its container is gone (" + engine + " no longer knows " + name + ")";
      return end;
    }
    state = trimmed(inspected->out);
    if (state.rfind("exited ", 0) == 0 || state.rfind("stopped ", 0) == 0) break;
    ::usleep(100'000);
  }
  std::istringstream words(state);
  std::string status, oom_killed;
  int code = -1;
  words >> status >> code >> oom_killed;
  if (oom_killed == "true") {
    end.reason = "out_of_memory";
    end.message = "its container was killed out of memory (" + engine + " inspect says OOMKilled)";
  } else if (code > 128) {
    end.message = "its agent was killed by signal " + std::to_string(code - 128) + " (" + engine + " inspect)";
  } else {
    end.reason = "exited";
    end.message = "its agent exited with status " + std::to_string(code) + " (" + engine +
                  " inspect; the agent's own reason is not read from files the sandbox can write)";
  }
  if (code >= 0) end.exit_code = code;
  return end;
}

Status terminate_container_sandbox(const SandboxStore& store, const SandboxRecord& record,
                                   std::chrono::milliseconds grace, bool* killed) {
  if (killed) *killed = false;
  std::string engine = record.spec.value("engine", record.backend);
  std::string name = record.spec.value("container", container_name(record.id));
  auto missing = [](const ProgramRun& run) {
    return run.err.find("no such container") != std::string::npos || run.err.find("No such container") != std::string::npos;
  };
  if (state_of_agent_process(record) == "running") {
    long long seconds = static_cast<long long>(std::ceil(static_cast<double>(grace.count()) / 1000.0)) + 1;
    auto stopped = run_program(engine, {"stop", "--time", std::to_string(seconds), name}, grace + std::chrono::seconds(60));
    if (!stopped) return stopped.status();
    if (stopped->status != 0 && !missing(*stopped)) {
      return Status(ErrorCode::internal, engine + " stop " + name + ": " + stopped->error_line());
    }
    auto code = run_program(engine, {"inspect", "--format", "{{.State.ExitCode}}", name});
    if (killed && code && code->status == 0) *killed = trimmed(code->out) == "137";
  }
  auto removed = run_program(engine, force_remove(engine, name));
  if (!removed) return removed.status();
  if (removed->status != 0 && !missing(*removed)) {
    return Status(ErrorCode::internal, engine + " rm " + name + ": " + removed->error_line());
  }
  kill_relay(record);
  return store.remove(record);
}

}  // namespace gpubox::host
