#include "host/backends/local/local_backend.h"

#include <fcntl.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "host/backends/local/capabilities.h"
#include "host/backends/local/runtime_binds.h"
#include "host/backends/local/sandbox_root.h"
#include "host/backends/local/user_namespace.h"
#include "base/fd.h"

namespace gpubox::host {
namespace {

using Clock = std::chrono::steady_clock;

// The agent's descriptors, fixed numbers in its process.
constexpr int kConfigFd = 3;
constexpr int kReadyFd = 4;
constexpr int kHostDirFd = 5;  // record.host_dir(): the agent's files for the host

// Set-up steps of the child, reported with errno when one fails.
enum Stage : int {
  stage_session = 1,
  stage_cgroup,
  stage_rlimit,
  stage_hostname,
  stage_root,
  stage_loopback,
  stage_descriptors,
  stage_chdir,
  stage_user_namespace,
  stage_cgroup_namespace,
  stage_capabilities,
  stage_exec,
};

const char* stage_name(int stage) {
  switch (stage) {
    case stage_session: return "setsid";
    case stage_cgroup: return "waiting to be moved into the cgroups";
    case stage_rlimit: return "setting the rlimits";
    case stage_hostname: return "setting the hostname";
    case stage_root: return "building the root:";
    case stage_loopback: return "bringing up loopback";
    case stage_descriptors: return "setting up descriptors";
    case stage_chdir: return "entering the work dir";
    case stage_user_namespace: return "entering the user namespace";
    case stage_cgroup_namespace: return "entering a cgroup namespace";
    case stage_capabilities: return "dropping capabilities";
    case stage_exec: return "executing the agent";
    default: return "setting up";
  }
}

struct SetupFailure {
  int stage = 0;
  int error = 0;
  char detail[256] = {};
};

// Everything the child needs, prepared before the clone.
struct ChildPlan {
  const LocalSandboxSpec* spec = nullptr;
  const LimitPlan* limits = nullptr;
  RootPlan root;
  std::string hostname;
  int userns_fd = -1;  // --userns: the namespace to enter before the exec
  int config_fd = -1;
  int ready_fd = -1;
  int log_fd = -1;
  int host_dir_fd = -1;
  int null_fd = -1;
  int error_fd = -1;
  int go_fd = -1;  // read end: one byte once the CLI has moved the child into its cgroups
  std::vector<std::string> argv;
  std::vector<std::string> envp;
};

[[noreturn]] void child_fail(const ChildPlan& plan, int stage, const std::string& detail = "") {
  SetupFailure failure;
  failure.stage = stage;
  failure.error = errno;
  std::strncpy(failure.detail, detail.c_str(), sizeof failure.detail - 1);
  [[maybe_unused]] auto n = ::write(plan.error_fd, &failure, sizeof failure);
  ::_exit(127);
}

bool bring_up_loopback() {
  int sock = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (sock < 0) return false;
  ifreq request{};
  std::strncpy(request.ifr_name, "lo", IFNAMSIZ - 1);
  bool ok = ::ioctl(sock, SIOCGIFFLAGS, &request) == 0;
  request.ifr_flags = static_cast<short>(request.ifr_flags | IFF_UP | IFF_RUNNING);
  ok = ok && ::ioctl(sock, SIOCSIFFLAGS, &request) == 0;
  ::close(sock);
  return ok;
}

// Runs in the cloned child (a copy of the CLI, single-threaded): sets up the
// sandbox from inside its new namespaces, then becomes the agent.
[[noreturn]] void child_main(const ChildPlan& plan) {
  if (::setsid() < 0) child_fail(plan, stage_session);
  for (const auto& [resource, value] : plan.limits->rlimits) {
    rlimit limit{value, value};
    if (::setrlimit(resource, &limit) != 0) child_fail(plan, stage_rlimit);
  }
  if (::sethostname(plan.hostname.data(), plan.hostname.size()) != 0) child_fail(plan, stage_hostname);
  RootError root_error;
  if (!build_sandbox_root(plan.root, &root_error)) {
    child_fail(plan, stage_root, root_error.step + " '" + root_error.path + "'");
  }
  if (plan.spec->network_none && !bring_up_loopback()) child_fail(plan, stage_loopback);

  // Descriptors: move every one we keep above the fixed numbers, then into place.
  int config = ::fcntl(plan.config_fd, F_DUPFD_CLOEXEC, 10);
  int ready = ::fcntl(plan.ready_fd, F_DUPFD_CLOEXEC, 10);
  int host_dir = ::fcntl(plan.host_dir_fd, F_DUPFD_CLOEXEC, 10);
  int userns = plan.userns_fd >= 0 ? ::fcntl(plan.userns_fd, F_DUPFD_CLOEXEC, 10) : -1;
  if (config < 0 || ready < 0 || host_dir < 0 || (plan.userns_fd >= 0 && userns < 0) || ::dup2(plan.null_fd, 0) != 0 ||
      ::dup2(plan.log_fd, 1) != 1 || ::dup2(plan.log_fd, 2) != 2 || ::dup2(config, kConfigFd) != kConfigFd ||
      ::dup2(ready, kReadyFd) != kReadyFd || ::dup2(host_dir, kHostDirFd) != kHostDirFd) {
    child_fail(plan, stage_descriptors);
  }
  // Everything else closes at exec (the error pipe is close-on-exec already).
  ::syscall(SYS_close_range, kHostDirFd + 1, ~0U, CLOSE_RANGE_CLOEXEC);
  ::fcntl(plan.error_fd, F_SETFD, FD_CLOEXEC);
  if (::chdir(kSandboxWorkDir) != 0) child_fail(plan, stage_chdir);

  std::vector<char*> argv, envp;
  for (const auto& arg : plan.argv) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  for (const auto& var : plan.envp) envp.push_back(const_cast<char*>(var.c_str()));
  envp.push_back(nullptr);
  // The CLI moves us into the cgroups while we set up (a cgroup v1 move
  // waits for an RCU grace period: 5-20 ms); the agent starts only once we
  // are there, so nothing it forks escapes the limits.
  char go = 0;
  ssize_t got;
  do {
    got = ::read(plan.go_fd, &go, 1);
  } while (got < 0 && errno == EINTR);
  if (got != 1) child_fail(plan, stage_cgroup);
  // Now that we are in the sandbox's cgroups, they become the root of its
  // cgroup namespace: /proc/*/cgroup inside shows "/", and nothing names
  // the host's tree or another sandbox's cgroups (sandbox_root.h mounts only ours).
  if (::unshare(CLONE_NEWCGROUP) != 0) child_fail(plan, stage_cgroup_namespace);
  if (userns >= 0 && !enter_user_namespace(userns)) child_fail(plan, stage_user_namespace);
  if (!confine_capabilities()) child_fail(plan, stage_capabilities);
  sigset_t empty;
  sigemptyset(&empty);
  ::sigprocmask(SIG_SETMASK, &empty, nullptr);
  // From its neutral path, so that it finds gpubox-modeld beside itself.
  ::execve(kSandboxAgentPath, argv.data(), envp.data());
  child_fail(plan, stage_exec, plan.argv[0]);
}

// What the sandbox's root holds: its state and work dirs, what its agent runs
// (host/backends/local/runtime_binds.h), the --mount binds, the GPUs, its own cgroups
// writable; the store, /root, /home and the engines' storage hidden.
RootPlan root_plan(const SandboxStore& store, const SandboxRecord& record, const LocalSandboxSpec& spec,
                   const std::string& layer_dir, const LimitPlan& limits) {
  RootPlan root;
  root.layer_dir = layer_dir;
  // The container engines' storage holds other containers' and sandboxes' files.
  root.hidden = {"/root", "/home", store.root(), "/var/lib/containers", "/var/lib/docker", "/var/lib/containerd"};
  std::vector<std::string> covered = root.hidden;
  covered.insert(covered.end(), {"/tmp", "/var/tmp", "/run"});
  std::string python;  // a wrong type is the agent's to refuse
  if (auto kernel = spec.agent_config.find("kernel"); kernel != spec.agent_config.end() && kernel->is_object()) {
    if (auto given = kernel->find("python"); given != kernel->end() && given->is_string()) python = *given;
  }
  for (auto& bind : runtime_binds(spec.agent_path, python, covered)) root.binds.push_back(std::move(bind));
  root.binds.push_back({record.agent_dir(), kSandboxStateDir, false});
  root.binds.push_back({record.work_dir(), kSandboxWorkDir, false});
  for (const auto& mount : spec.mounts) root.binds.push_back({mount.source, mount.target, mount.read_only});
  for (const auto& node : spec.gpus.device_nodes) root.binds.push_back({node, node, false, false});
  for (const auto& file : spec.gpus.driver_files) root.binds.push_back({file, file, true, false});
  if (!spec.network_none) {
    // A resolver file kept under the host's /run (systemd-resolved) would be
    // hidden by the sandbox's own /run: its directory comes along read-only.
    char resolved[PATH_MAX];
    if (::realpath("/etc/resolv.conf", resolved) && std::string(resolved).rfind("/run/", 0) == 0) {
      std::string dir(resolved);
      dir = dir.substr(0, dir.rfind('/'));
      root.binds.push_back({dir, dir, true, false});
    }
  }
  for (const auto& procs : limits.procs_files) {
    std::string dir = procs.substr(0, procs.rfind('/'));
    std::string mount_point = cgroup_mount_point(dir);
    if (!mount_point.empty()) root.cgroups.push_back({dir, mount_point, false, false});
  }
  return root;
}

// A snapshot's upper layer in place of the empty one, before the overlay is
// mounted (overlayfs must not see its upper layer change under it).
Status seed_upper_layer(const LocalSandboxSpec& spec, const std::string& layer_dir, const IdRange& ids) {
  if (!spec.seed_upper) return Status::ok();
  harvest::LayerIds layer_ids;
  if (spec.user_namespace) layer_ids = {ids.host_uid, ids.host_gid, ids.count};
  std::string upper = upper_dir(layer_dir);
  if (::rmdir(upper.c_str()) != 0) return Status::from_errno(errno, "cannot replace '" + upper + "'");
  return spec.seed_upper(upper, layer_ids);
}

// The protections of a sandbox, as `info` shows them.
nlohmann::json isolation_summary(const LocalSandboxSpec& spec, const IdRange& ids) {
  nlohmann::json gpus = nlohmann::json::array();
  for (int gpu : spec.gpus.indices) gpus.push_back(gpu);
  return {{"root", "overlay"},
          {"hidden", {"/root", "/home", "the gpubox store", "/var/lib/containers", "/var/lib/docker", "/var/lib/containerd"}},
          {"capabilities", capability_names(sandbox_capabilities())},
          {"agent_capabilities", capability_names(agent_only_capabilities())},
          {"no_new_privs", true},
          {"user_namespace", spec.user_namespace ? nlohmann::json{{"uid_map", ids.uid_map().substr(0, ids.uid_map().size() - 1)},
                                                                  {"gid_map", ids.gid_map().substr(0, ids.gid_map().size() - 1)}}
                                                 : nlohmann::json(nullptr)},
          {"network", spec.network_none ? "none" : "host"},
          {"gpus", gpus}};
}

int pidfd_open(pid_t pid) { return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)); }

std::string read_text(const std::string& path, size_t limit = 4096) {
  std::ifstream in(path);
  std::string text(limit, '\0');
  in.read(text.data(), static_cast<std::streamsize>(limit));
  text.resize(static_cast<size_t>(in.gcount()));
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  return text;
}

// A memfd holding text, positioned at its start.
Result<Fd> memfd_with(const std::string& text) {
  Fd fd(::memfd_create("gpubox-config", MFD_CLOEXEC));
  if (fd.get() < 0) return Status::from_errno(errno, "memfd_create");
  size_t written = 0;
  while (written < text.size()) {
    ssize_t n = ::write(fd.get(), text.data() + written, text.size() - written);
    if (n <= 0) return Status::from_errno(errno, "writing the config");
    written += static_cast<size_t>(n);
  }
  ::lseek(fd.get(), 0, SEEK_SET);
  return fd;
}

// Waits for "ready\n" on ready_read, or for the agent to exit. Returns ok,
// or why not.
Status await_ready(int ready_read, pid_t pid, int pidfd, std::chrono::milliseconds timeout, const std::string& log_path) {
  auto deadline = Clock::now() + timeout;
  std::string got;
  while (true) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return Status(ErrorCode::unavailable, "the agent was not ready within " + std::to_string(timeout.count()) + " ms");
    pollfd fds[2] = {{ready_read, POLLIN, 0}, {pidfd, POLLIN, 0}};
    int n = ::poll(fds, 2, static_cast<int>(left));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::from_errno(errno, "poll");
    if (fds[0].revents) {
      char buffer[16];
      ssize_t r = ::read(ready_read, buffer, sizeof buffer);
      if (r > 0) {
        got.append(buffer, static_cast<size_t>(r));
        if (got.find("ready\n") != std::string::npos) return Status::ok();
        continue;
      }
      if (r < 0 && errno == EINTR) continue;
      // End of file: the agent closed the pipe without "ready"; it is exiting.
    } else if (!fds[1].revents) {
      continue;
    }
    int status = 0;
    pid_t reaped = ::waitpid(pid, &status, 0);
    std::string output = read_text(log_path);
    int code = reaped == pid && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    std::string how = reaped != pid              ? "ended"
                      : WIFEXITED(status)        ? "exited with status " + std::to_string(code)
                      : WIFSIGNALED(status)      ? "was killed by signal " + std::to_string(WTERMSIG(status))
                                                 : "ended";
    std::string message = "the agent " + how + " before it was ready" + (output.empty() ? "" : ": " + output);
    // Status 2: the agent refused its config or command line.
    return Status(code == 2 ? ErrorCode::invalid_request : ErrorCode::internal, message);
  }
}

}  // namespace

Result<SandboxRecord> create_local_sandbox(SandboxStore& store, const LocalSandboxSpec& spec) {
  if (::access(spec.agent_path.c_str(), X_OK) != 0) {
    return Status(ErrorCode::invalid_request, "the agent binary '" + spec.agent_path + "' is not executable (set GPUBOX_AGENT)");
  }
  auto reserved = store.reserve(spec.name, spec.public_spec);
  if (!reserved) return reserved.status();
  SandboxRecord record = std::move(*reserved);
  // The host's endpoint is in host_dir(), which no sandbox process but its agent reaches.
  std::string endpoint_path = record.host_dir() + "/rpc.sock";
  auto fail = [&](Status status, const LimitPlan* limits) -> Status {
    if (limits) (void)remove_cgroups(*limits);
    (void)store.remove(record);
    return status;
  };
  if (endpoint_path.size() > 107) {
    return fail(Status(ErrorCode::invalid_request, "the socket path '" + endpoint_path +
                                                        "' is longer than 107 bytes: set XDG_STATE_HOME to a shorter directory"),
                nullptr);
  }
  auto limits = prepare_limits(record.id, spec.limits);
  if (!limits) return fail(limits.status(), nullptr);
  record.spec["limits_enforced_by"] = limits->enforced_by;
  record.spec["limit_plan"] = limits->to_json();

  std::string layer_dir = record.dir + "/root";
  if (!make_layer_dirs(layer_dir)) return fail(Status::from_errno(errno, "cannot create '" + layer_dir + "'"), &*limits);
  IdRange ids;
  if (spec.user_namespace) ids = subordinate_range();
  if (Status seeded = seed_upper_layer(spec, layer_dir, ids); !seeded) return fail(seeded, &*limits);
  Fd userns;
  if (spec.user_namespace) {
    auto made = make_user_namespace(ids);
    if (!made) return fail(made.status(), &*limits);
    userns = std::move(*made);
    // The sandbox's root owns its root directory and its own cgroups (delegated, not their limits).
    std::vector<std::string> owned = {upper_dir(layer_dir)};
    for (const auto& procs : limits->procs_files) {
      std::string dir = procs.substr(0, procs.rfind('/'));
      for (const char* file : {"", "/cgroup.procs", "/tasks", "/cgroup.threads", "/cgroup.subtree_control"}) {
        if (::access((dir + file).c_str(), F_OK) == 0) owned.push_back(dir + file);
      }
    }
    for (const auto& path : owned) {
      if (!hand_over(path, ids)) return fail(Status::from_errno(errno, "cannot hand '" + path + "' to the sandbox's root"), &*limits);
    }
  }
  record.spec["isolation"] = isolation_summary(spec, ids);
  // The agent's files for the host (rpc.sock, agent.log, exit.json) go to
  // host_dir(): never mounted in the sandbox, the agent reaches it through
  // kHostDirFd alone (docs/security.md).
  if (::mkdir(record.host_dir().c_str(), 0700) != 0) {
    return fail(Status::from_errno(errno, "cannot create '" + record.host_dir() + "'"), &*limits);
  }
  // Under --userns the agent is the range's root: it writes there as that uid (still through its fd alone).
  if (userns.valid() && !hand_over(record.host_dir(), ids)) {
    return fail(Status::from_errno(errno, "cannot hand '" + record.host_dir() + "' to the sandbox's root"), &*limits);
  }
  Fd host_dir(::open(record.host_dir().c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!host_dir.valid()) return fail(Status::from_errno(errno, "cannot open '" + record.host_dir() + "'"), &*limits);
  record.endpoint = "ipc://" + endpoint_path;
  record.spec["agent_files_private"] = true;

  nlohmann::json config = spec.agent_config;
  config["state_dir"] = kSandboxStateDir;
  config["log"]["stderr"] = false;  // the log goes to STATE_DIR/agent.log only
  // The agent filters what it starts (agent/seccomp_filter.h); namespaces
  // only where root inside is already an unprivileged range outside.
  config["seccomp"] = {{"profile", spec.seccomp_unconfined ? "unconfined" : "default"},
                       {"allow_namespaces", spec.user_namespace}};
  auto& endpoints = config["rpc"]["endpoints"];
  std::string inner_endpoint = std::string("ipc://") + kSandboxStateDir + "/rpc.sock";
  if (!endpoints.is_array()) endpoints = nlohmann::json::array();
  if (std::find(endpoints.begin(), endpoints.end(), inner_endpoint) == endpoints.end()) endpoints.push_back(inner_endpoint);
  auto config_fd = memfd_with(config.dump());
  if (!config_fd) return fail(config_fd.status(), &*limits);

  int pipe_fds[2], error_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) return fail(Status::from_errno(errno, "pipe2"), &*limits);
  Fd ready_read(pipe_fds[0]), ready_write(pipe_fds[1]);
  if (::pipe2(error_fds, O_CLOEXEC) != 0) return fail(Status::from_errno(errno, "pipe2"), &*limits);
  Fd error_read(error_fds[0]), error_write(error_fds[1]);
  int go_fds[2];
  if (::pipe2(go_fds, O_CLOEXEC) != 0) return fail(Status::from_errno(errno, "pipe2"), &*limits);
  Fd go_read(go_fds[0]), go_write(go_fds[1]);
  std::string log_path = record.host_dir() + "/agent.stderr";
  Fd log_fd(::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600));
  Fd null_fd(::open("/dev/null", O_RDWR | O_CLOEXEC));
  if (log_fd.get() < 0 || null_fd.get() < 0) return fail(Status::from_errno(errno, "open " + log_path), &*limits);

  ChildPlan plan;
  plan.spec = &spec;
  plan.limits = &*limits;
  plan.root = root_plan(store, record, spec, layer_dir, *limits);
  plan.root.idmap_userns_fd = userns.get();
  record.spec["root_mount_points"] = root_mount_points(plan.root);
  if (userns.valid()) {
    plan.root.tmpfs_uid = ids.host_uid;
    plan.root.tmpfs_gid = ids.host_gid;
  }
  plan.userns_fd = userns.get();
  plan.hostname = record.name.empty() ? record.id : record.name;
  plan.config_fd = config_fd->get();
  plan.ready_fd = ready_write.get();
  plan.log_fd = log_fd.get();
  plan.host_dir_fd = host_dir.get();
  plan.null_fd = null_fd.get();
  plan.error_fd = error_write.get();
  plan.go_fd = go_read.get();
  plan.argv = {kSandboxAgentPath, "--config-fd", std::to_string(kConfigFd), "--ready-fd", std::to_string(kReadyFd),
               "--host-dir-fd", std::to_string(kHostDirFd)};
  plan.envp = {"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", std::string("HOME=") + kSandboxWorkDir,
               "LANG=C.UTF-8", "HOSTNAME=" + plan.hostname, "GPUBOX_SANDBOX_ID=" + record.id};

  unsigned long flags = CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | SIGCHLD;
  if (spec.network_none) flags |= CLONE_NEWNET;
  // A raw clone without CLONE_VM behaves as fork: the child runs on a copy of
  // this (single-threaded) process and becomes PID 1 of the new namespaces.
  long cloned = ::syscall(SYS_clone, flags, nullptr, nullptr, nullptr, nullptr);
  if (cloned < 0) return fail(Status::from_errno(errno, "clone (are you root?)"), &*limits);
  if (cloned == 0) child_main(plan);
  pid_t pid = static_cast<pid_t>(cloned);
  error_write.reset();
  ready_write.reset();
  go_read.reset();
  config_fd->reset();

  // Into the cgroups, while the child sets up its mounts; then let it exec.
  Status joined;
  for (const auto& procs : limits->procs_files) {
    int fd = ::open(procs.c_str(), O_WRONLY | O_CLOEXEC);
    std::string text = std::to_string(pid);
    if (fd < 0 || ::write(fd, text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
      joined = Status::from_errno(errno, "cannot move the agent into '" + procs + "'");
    }
    if (fd >= 0) ::close(fd);
    if (!joined) break;
  }
  if (joined) (void)!::write(go_write.get(), "g", 1);
  go_write.reset();  // without the byte: the child gives up

  auto kill_and_fail = [&](Status status) -> Status {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    return fail(std::move(status), &*limits);
  };
  SetupFailure failure;
  ssize_t n;
  do {
    n = ::read(error_read.get(), &failure, sizeof failure);
  } while (n < 0 && errno == EINTR);
  if (n == static_cast<ssize_t>(sizeof failure) && (joined || failure.stage != stage_cgroup)) {
    std::string detail = failure.detail[0] ? std::string(" '") + failure.detail + "'" : "";
    return kill_and_fail(Status::from_errno(failure.error, std::string("sandbox set-up failed ") +
                                                               stage_name(failure.stage) + detail));
  }
  if (!joined) return kill_and_fail(joined);
  auto start_time = process_start_time(pid);
  if (!start_time) return kill_and_fail(Status(ErrorCode::internal, "the agent vanished at its start"));
  record.agent = {pid, *start_time};
  if (Status saved = store.save(record); !saved) return kill_and_fail(saved);

  Fd pidfd(pidfd_open(pid));
  Status ready = await_ready(ready_read.get(), pid, pidfd.get(), spec.ready_timeout, log_path);
  if (!ready) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, WNOHANG);
    return fail(ready, &*limits);
  }
  return record;
}

Status terminate_local_sandbox(const SandboxStore& store, const SandboxRecord& record, std::chrono::milliseconds grace,
                               bool* killed) {
  if (killed) *killed = false;
  // The pidfd pins the process: once it is open and the start time matches,
  // signals cannot reach a process that reused the pid.
  Fd pidfd(record.agent.pid > 0 ? pidfd_open(record.agent.pid) : -1);
  if (pidfd.get() >= 0 && process_alive(record.agent)) {
    auto signal = [&](int sig) { return ::syscall(SYS_pidfd_send_signal, pidfd.get(), sig, nullptr, 0) == 0; };
    auto exited_within = [&](std::chrono::milliseconds wait) {
      pollfd fd{pidfd.get(), POLLIN, 0};
      auto deadline = Clock::now() + wait;
      while (true) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
        int n = ::poll(&fd, 1, static_cast<int>(std::max<long long>(left, 0)));
        if (n > 0) return true;
        if (n == 0 || (n < 0 && errno != EINTR)) return false;
      }
    };
    if (signal(SIGTERM) && !exited_within(grace + std::chrono::seconds(1))) {
      if (killed) *killed = true;
      signal(SIGKILL);
      if (!exited_within(std::chrono::seconds(5))) {
        return Status(ErrorCode::busy, "the agent (pid " + std::to_string(record.agent.pid) + ") survived SIGKILL");
      }
    }
  }
  Status cgroups = remove_cgroups(LimitPlan::from_json(record.spec.value("limit_plan", nlohmann::json::object())));
  Status removed = store.remove(record);
  if (!cgroups) return cgroups;
  return removed;
}

}  // namespace gpubox::host
