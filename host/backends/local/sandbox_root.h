// The mount plan of a local sandbox's root: a copy-on-write overlay of the
// host's `/` (read-only lower layer; upper and work dirs in the sandbox's store
// directory), into which the sandbox pivots. Inside: a fresh /proc (its
// kernel knobs read-only, its leaky files masked), tmpfs on /tmp, /run and
// /dev/shm, a minimal /dev (null, zero, full, random, urandom, tty, a private
// devpts), /sys read-only with /sys/fs/cgroup holding only the sandbox's own
// cgroups (writable; the root of its cgroup namespace, local_backend.h), and
// the store, /root, /home and the container engines' storage hidden behind
// empty tmpfs unless a bind mount puts something there. build_sandbox_root() runs in the cloned child, inside its new mount
// namespace, while it still holds the host's capabilities; the plan is made
// before the clone. One thread.
#pragma once

#include <string>
#include <vector>

namespace gpubox::host {

// A host path placed at a sandbox path.
struct RootBind {
  std::string source;  // host path (absolute)
  std::string target;  // sandbox path (absolute)
  bool read_only = false;
  // Seen through the sandbox's uid mapping when it has one (false: device
  // nodes and driver files, which keep the host's owners).
  bool idmapped = true;
};

struct RootPlan {
  std::string layer_dir;  // STORE/sandboxes/ID/root: holds upper/, work/ and the mount point merged/
  // Hidden behind empty tmpfs (the whole store of every sandbox, /root, /home).
  std::vector<std::string> hidden;
  // Placed after the hiding, in order: the state dir, the work dir, --mount
  // binds, GPU device nodes and driver files.
  std::vector<RootBind> binds;
  // The sandbox's own cgroup directories (source), each placed writable at
  // the mount point of its hierarchy (target: /sys/fs/cgroup/memory,
  // /sys/fs/cgroup/unified, or /sys/fs/cgroup itself on a cgroup v2 host),
  // alone in an otherwise empty /sys/fs/cgroup (the agent makes its job
  // cgroups there; the limits sit one level up, out of sight).
  std::vector<RootBind> cgroups;
  // A userns fd whose mapping the lower layer and the binds are idmapped
  // through (-1: none).
  int idmap_userns_fd = -1;
  // Host ids that own the fresh tmpfs roots (/tmp, /run, /dev, the hidden
  // directories): the sandbox's root under --userns.
  unsigned tmpfs_uid = 0;
  unsigned tmpfs_gid = 0;
};

// The mount point of the cgroup hierarchy that holds the host directory dir
// (the longest cgroup or cgroup2 mount point above it in
// /proc/self/mountinfo); "" when none does.
std::string cgroup_mount_point(const std::string& dir);

// The directories of a sandbox's layers, below layer_dir.
std::string upper_dir(const std::string& layer_dir);
std::string work_dir_of_layers(const std::string& layer_dir);
std::string merged_dir(const std::string& layer_dir);

// Every sandbox path where build_sandbox_root() mounts something over the
// overlay (the fresh /dev, /proc, /sys, /tmp, /run, the hidden directories,
// the binds' targets): what the upper layer holds below them, the sandbox
// never sees.
std::vector<std::string> root_mount_points(const RootPlan& plan);

// Creates layer_dir with its upper/, work/ and merged/ (mode 0755).
bool make_layer_dirs(const std::string& layer_dir);

// What failed in build_sandbox_root: the step and the path (errno is left set).
struct RootError {
  std::string step;
  std::string path;
};

// Builds the root and pivots into it; the cwd is then "/". False with *error
// (and errno) on the first failure. REQUIRES: a private mount namespace and
// CAP_SYS_ADMIN over it; the caller's own `/` is the host's.
bool build_sandbox_root(const RootPlan& plan, RootError* error);

}  // namespace gpubox::host
