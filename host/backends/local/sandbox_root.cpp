#include "host/backends/local/sandbox_root.h"

#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "base/fd.h"

namespace gpubox::host {
namespace {

// The host devices a minimal /dev holds (as Docker and bubblewrap give).
constexpr const char* kDevices[] = {"null", "zero", "full", "random", "urandom", "tty"};
// /proc entries that describe or steer the whole host: read-only, or masked
// (Docker's lists).
constexpr const char* kProcReadOnly[] = {"sys", "sysrq-trigger", "irq", "bus", "fs"};
constexpr const char* kProcMaskedFiles[] = {"kcore", "keys", "timer_list", "sched_debug", "latency_stats"};
constexpr const char* kProcMaskedDirs[] = {"acpi", "scsi", "asound"};

bool fail(RootError* error, const char* step, const std::string& path) {
  int saved = errno;
  error->step = step;
  error->path = path;
  errno = saved;
  return false;
}

// mkdir -p (mode 0755).
bool make_dirs(const std::string& path) {
  for (size_t at = path.find('/', 1);; at = path.find('/', at + 1)) {
    std::string prefix = path.substr(0, at);
    if (!prefix.empty() && ::mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) return false;
    if (at == std::string::npos) return true;
  }
}

// A mount point for a tree at path: a directory, or an empty file for a
// file's tree, with its missing parents.
bool make_mount_point(const std::string& path, bool directory) {
  if (directory) return make_dirs(path);
  // An existing file is used as it is: opening a lower file for writing
  // would copy it up (a driver library: megabytes per sandbox).
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) return !S_ISDIR(st.st_mode);
  auto slash = path.rfind('/');
  if (slash > 0 && !make_dirs(path.substr(0, slash))) return false;
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) return false;
  ::close(fd);
  return true;
}

bool lstat_exists(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

bool set_attrs(int tree, unsigned long long set, unsigned long long clear, int userns_fd, bool recursive) {
  mount_attr attr{};
  attr.attr_set = set;
  attr.attr_clr = clear;
  if (set & MOUNT_ATTR_IDMAP) attr.userns_fd = static_cast<unsigned long long>(userns_fd);
  return ::mount_setattr(tree, "", AT_EMPTY_PATH | (recursive ? AT_RECURSIVE : 0), &attr, sizeof attr) == 0;
}

// A detached copy of the host tree at source (recursive), idmapped when asked.
int clone_tree(const std::string& source, int idmap_userns_fd) {
  int tree = ::open_tree(AT_FDCWD, source.c_str(), OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE);
  if (tree >= 0 && idmap_userns_fd >= 0 && !set_attrs(tree, MOUNT_ATTR_IDMAP, 0, idmap_userns_fd, true)) {
    int saved = errno;
    ::close(tree);
    errno = saved;
    return -1;
  }
  return tree;
}

bool place(int tree, const std::string& target) {
  return ::move_mount(tree, "", AT_FDCWD, target.c_str(), MOVE_MOUNT_F_EMPTY_PATH) == 0;
}

// The owner of the tmpfs roots, as mount options (",uid=N,gid=N").
std::string g_tmpfs_owner;

bool mount_tmpfs(const std::string& target, const std::string& options, unsigned long flags = MS_NOSUID | MS_NODEV) {
  std::string all = options + g_tmpfs_owner;
  return ::mount("tmpfs", target.c_str(), "tmpfs", flags, all.c_str()) == 0;
}

bool bind_read_only(const std::string& path) {
  return ::mount(path.c_str(), path.c_str(), nullptr, MS_BIND | MS_REC, nullptr) == 0 &&
         ::mount(nullptr, path.c_str(), nullptr, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, nullptr) == 0;
}

// The overlay: the host's `/` (or its idmapped copy at lower) under the
// sandbox's upper layer, mounted at merged. No device nodes, no set-uid.
bool mount_overlay(const std::string& lower, const std::string& layer_dir, RootError* error) {
  Fd context(::fsopen("overlay", FSOPEN_CLOEXEC));
  if (!context.valid()) return fail(error, "opening overlayfs", "overlay");
  std::string upper = upper_dir(layer_dir), work = work_dir_of_layers(layer_dir);
  if (::fsconfig(context.get(), FSCONFIG_SET_STRING, "lowerdir", lower.c_str(), 0) != 0) {
    return fail(error, "setting the overlay's lower layer", lower);
  }
  if (::fsconfig(context.get(), FSCONFIG_SET_STRING, "upperdir", upper.c_str(), 0) != 0) {
    return fail(error, "setting the overlay's upper layer", upper);
  }
  if (::fsconfig(context.get(), FSCONFIG_SET_STRING, "workdir", work.c_str(), 0) != 0) {
    return fail(error, "setting the overlay's work dir", work);
  }
  if (::fsconfig(context.get(), FSCONFIG_CMD_CREATE, nullptr, nullptr, 0) != 0) {
    return fail(error, "creating the overlay", layer_dir);
  }
  Fd mount(::fsmount(context.get(), FSMOUNT_CLOEXEC, MOUNT_ATTR_NODEV | MOUNT_ATTR_NOSUID));
  if (!mount.valid()) return fail(error, "mounting the overlay", layer_dir);
  if (!place(mount.get(), merged_dir(layer_dir))) return fail(error, "placing the overlay", merged_dir(layer_dir));
  return true;
}

// A minimal /dev at root + "/dev": tmpfs, the host's harmless devices bound
// in, a private devpts, /dev/shm.
bool build_dev(const std::string& root, const std::vector<int>& device_trees, RootError* error) {
  std::string dev = root + "/dev";
  if (!make_dirs(dev) || !mount_tmpfs(dev, "mode=0755,size=64k", MS_NOSUID | MS_NOEXEC)) return fail(error, "mounting /dev", dev);
  for (size_t i = 0; i < device_trees.size(); ++i) {
    std::string node = dev + "/" + kDevices[i];
    if (!make_mount_point(node, false) || !place(device_trees[i], node)) return fail(error, "binding a device", node);
  }
  std::string pts = dev + "/pts";
  if (::mkdir(pts.c_str(), 0755) != 0 ||
      ::mount("devpts", pts.c_str(), "devpts", MS_NOSUID | MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620") != 0) {
    return fail(error, "mounting devpts", pts);
  }
  std::string shm = dev + "/shm";
  if (::mkdir(shm.c_str(), 01777) != 0 || !mount_tmpfs(shm, "mode=1777")) return fail(error, "mounting /dev/shm", shm);
  const std::pair<const char*, const char*> links[] = {
      {"pts/ptmx", "ptmx"}, {"/proc/self/fd", "fd"}, {"/proc/self/fd/0", "stdin"},
      {"/proc/self/fd/1", "stdout"}, {"/proc/self/fd/2", "stderr"}};
  for (const auto& [to, name] : links) {
    if (::symlink(to, (dev + "/" + name).c_str()) != 0) return fail(error, "linking in /dev", dev + "/" + name);
  }
  return true;
}

// A fresh /proc of the sandbox's PID namespace, with the host-wide knobs
// read-only and the host-describing files masked.
bool build_proc(const std::string& root, RootError* error) {
  std::string proc = root + "/proc";
  if (!make_dirs(proc) || ::mount("proc", proc.c_str(), "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) != 0) {
    return fail(error, "mounting /proc", proc);
  }
  for (const char* name : kProcReadOnly) {
    std::string path = proc + "/" + name;
    if (lstat_exists(path) && !bind_read_only(path)) return fail(error, "making a /proc entry read-only", path);
  }
  for (const char* name : kProcMaskedFiles) {
    std::string path = proc + "/" + name;
    if (lstat_exists(path) && ::mount((root + "/dev/null").c_str(), path.c_str(), nullptr, MS_BIND, nullptr) != 0) {
      return fail(error, "masking a /proc file", path);
    }
  }
  for (const char* name : kProcMaskedDirs) {
    std::string path = proc + "/" + name;
    if (lstat_exists(path) && !mount_tmpfs(path, "size=4k", MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_RDONLY)) {
      return fail(error, "masking a /proc directory", path);
    }
  }
  return true;
}

// The host's /sys, read-only all the way down; on /sys/fs/cgroup, an empty
// read-only tmpfs with the sandbox's own cgroups, writable, at their
// hierarchies' mount points: no other sandbox's cgroup is in sight.
bool build_sys(const std::string& root, int sys_tree, const std::vector<int>& cgroup_trees,
               const std::vector<RootBind>& cgroups, RootError* error) {
  std::string sys = root + "/sys";
  if (!make_dirs(sys) || !set_attrs(sys_tree, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC, 0,
                                    -1, true) ||
      !place(sys_tree, sys)) {
    return fail(error, "binding /sys read-only", sys);
  }
  std::string firmware = sys + "/firmware";
  if (lstat_exists(firmware) && !mount_tmpfs(firmware, "size=4k", MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_RDONLY)) {
    return fail(error, "masking /sys/firmware", firmware);
  }
  std::string fs_cgroup = sys + "/fs/cgroup";
  if (!lstat_exists(fs_cgroup)) return true;
  if (!mount_tmpfs(fs_cgroup, "mode=0755,size=4k", MS_NOSUID | MS_NODEV | MS_NOEXEC)) {
    return fail(error, "hiding the host's cgroups", fs_cgroup);
  }
  for (const auto& cgroup : cgroups) {
    if (!make_dirs(root + cgroup.target)) return fail(error, "making a cgroup mount point", cgroup.target);
  }
  if (::mount(nullptr, fs_cgroup.c_str(), nullptr, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
              nullptr) != 0) {
    return fail(error, "making /sys/fs/cgroup read-only", fs_cgroup);
  }
  for (size_t i = 0; i < cgroup_trees.size(); ++i) {
    if (!place(cgroup_trees[i], root + cgroups[i].target)) return fail(error, "binding the sandbox's cgroup", cgroups[i].source);
  }
  return true;
}

// Swaps the root for new_root and lets go of the host's (pivot_root(".", ".")
// stacks the old root on the new one; the lazy unmount then drops it).
bool pivot_into(const std::string& new_root, RootError* error) {
  if (::chdir(new_root.c_str()) != 0) return fail(error, "entering the new root", new_root);
  if (::syscall(SYS_pivot_root, ".", ".") != 0) return fail(error, "pivot_root", new_root);
  if (::umount2(".", MNT_DETACH) != 0) return fail(error, "detaching the host's root", "/");
  if (::chdir("/") != 0) return fail(error, "entering the new root", "/");
  return true;
}

}  // namespace

std::string cgroup_mount_point(const std::string& dir) {
  std::ifstream in("/proc/self/mountinfo");
  std::string line, best;
  while (std::getline(in, line)) {
    // ID PARENT MAJ:MIN ROOT MOUNT_POINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER_OPTIONS
    std::istringstream fields(line);
    std::string skip, mount_point, field;
    fields >> skip >> skip >> skip >> skip >> mount_point;
    while (fields >> field && field != "-") {
    }
    std::string type;
    fields >> type;
    if (type != "cgroup" && type != "cgroup2") continue;
    bool above = dir == mount_point || (dir.rfind(mount_point + "/", 0) == 0);
    if (above && mount_point.size() > best.size()) best = mount_point;
  }
  return best;
}

std::string upper_dir(const std::string& layer_dir) { return layer_dir + "/upper"; }
std::string work_dir_of_layers(const std::string& layer_dir) { return layer_dir + "/work"; }
std::string merged_dir(const std::string& layer_dir) { return layer_dir + "/merged"; }

std::vector<std::string> root_mount_points(const RootPlan& plan) {
  std::vector<std::string> points = {"/dev", "/proc", "/sys", "/tmp", "/var/tmp", "/run"};
  points.insert(points.end(), plan.hidden.begin(), plan.hidden.end());
  for (const auto& bind : plan.binds) points.push_back(bind.target);
  return points;
}

bool make_layer_dirs(const std::string& layer_dir) {
  for (const std::string& dir : {layer_dir, upper_dir(layer_dir), work_dir_of_layers(layer_dir), merged_dir(layer_dir)}) {
    if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) return false;
  }
  return true;
}

bool build_sandbox_root(const RootPlan& plan, RootError* error) {
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) return fail(error, "making the mounts private", "/");
  // The child is a single-threaded copy of the CLI: this global is its own.
  g_tmpfs_owner = ",uid=" + std::to_string(plan.tmpfs_uid) + ",gid=" + std::to_string(plan.tmpfs_gid);

  // Detached copies of every host tree first, while the host's paths still
  // resolve (the hiding below would cover some of them).
  std::vector<int> bind_trees, device_trees, cgroup_trees;
  for (const auto& bind : plan.binds) {
    int tree = clone_tree(bind.source, bind.idmapped ? plan.idmap_userns_fd : -1);
    if (tree < 0) return fail(error, "opening a bind mount source", bind.source);
    if (bind.read_only && !set_attrs(tree, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID, 0, -1, true)) {
      return fail(error, "making a mount read-only", bind.source);
    }
    bind_trees.push_back(tree);
  }
  for (const char* device : kDevices) {
    int tree = clone_tree(std::string("/dev/") + device, -1);
    if (tree < 0) return fail(error, "opening a device", std::string("/dev/") + device);
    device_trees.push_back(tree);
  }
  int sys_tree = clone_tree("/sys", -1);
  if (sys_tree < 0) return fail(error, "opening /sys", "/sys");
  for (const auto& cgroup : plan.cgroups) {
    int tree = ::open_tree(AT_FDCWD, cgroup.source.c_str(), OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
    if (tree < 0) return fail(error, "opening the sandbox's cgroup", cgroup.source);
    cgroup_trees.push_back(tree);
  }

  std::string lower = "/";
  if (plan.idmap_userns_fd >= 0) {
    // The host's root as the sandbox's users see it: owned by their root.
    lower = plan.layer_dir + "/lower";
    int tree = ::open_tree(AT_FDCWD, "/", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
    if (tree < 0 || !set_attrs(tree, MOUNT_ATTR_IDMAP | MOUNT_ATTR_RDONLY, 0, plan.idmap_userns_fd, false) ||
        (::mkdir(lower.c_str(), 0755) != 0 && errno != EEXIST) || !place(tree, lower)) {
      return fail(error, "idmapping the host's root", lower);
    }
    ::close(tree);
  }
  if (!mount_overlay(lower, plan.layer_dir, error)) return false;
  std::string root = merged_dir(plan.layer_dir);

  if (!build_dev(root, device_trees, error) || !build_proc(root, error) ||
      !build_sys(root, sys_tree, cgroup_trees, plan.cgroups, error)) {
    return false;
  }
  // /var/tmp too: buildah and podman keep their scratch trees there.
  for (const char* dir : {"/tmp", "/var/tmp", "/run"}) {
    if (!make_dirs(root + dir) || !mount_tmpfs(root + dir, std::strcmp(dir, "/run") != 0 ? "mode=1777" : "mode=0755")) {
      return fail(error, "mounting a tmpfs", dir);
    }
  }
  for (size_t i = 0; i < plan.hidden.size(); ++i) {
    const std::string& path = plan.hidden[i];
    bool covered = false;
    for (size_t j = 0; j < i; ++j) covered = covered || path.rfind(plan.hidden[j] + "/", 0) == 0;
    if (covered || !lstat_exists(root + path)) continue;
    if (!mount_tmpfs(root + path, "mode=0755,size=1m")) return fail(error, "hiding a host directory", path);
  }
  for (size_t i = 0; i < plan.binds.size(); ++i) {
    const RootBind& bind = plan.binds[i];
    struct stat st {};
    std::string target = root + bind.target;
    if (::stat(bind.source.c_str(), &st) != 0 || !make_mount_point(target, S_ISDIR(st.st_mode)) ||
        !place(bind_trees[i], target)) {
      return fail(error, "placing a bind mount", bind.target);
    }
    ::close(bind_trees[i]);
  }
  return pivot_into(root, error);
}

}  // namespace gpubox::host
