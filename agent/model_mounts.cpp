#include "agent/model_mounts.h"

#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/fd.h"
#include "base/status.h"

namespace gpubox {
namespace {

// 16 random bytes as hex: a mount point name that says nothing about the model.
Result<std::string> random_name() {
  unsigned char bytes[16];
  Fd fd(::open("/dev/urandom", O_RDONLY | O_CLOEXEC));
  if (!fd.valid() || ::read(fd.get(), bytes, sizeof bytes) != static_cast<ssize_t>(sizeof bytes)) {
    return Status(ErrorCode::internal, "cannot read /dev/urandom");
  }
  static const char hex[] = "0123456789abcdef";
  std::string name;
  for (unsigned char b : bytes) name += {hex[b >> 4], hex[b & 15]};
  return name;
}

// The flags that remount a bind read-only and keep what it had: in a user
// namespace, the nosuid/nodev/noexec/atime flags of a mount inherited from
// the host are locked, and a remount that drops them is refused.
unsigned long read_only_remount_flags(const std::string& target) {
  unsigned long flags = MS_BIND | MS_REMOUNT | MS_RDONLY;
  struct statvfs fs {};
  if (::statvfs(target.c_str(), &fs) != 0) return flags;
  const std::pair<unsigned long, unsigned long> kept[] = {{ST_NOSUID, MS_NOSUID},     {ST_NODEV, MS_NODEV},
                                                          {ST_NOEXEC, MS_NOEXEC},     {ST_NOATIME, MS_NOATIME},
                                                          {ST_NODIRATIME, MS_NODIRATIME}, {ST_RELATIME, MS_RELATIME}};
  for (const auto& [st, ms] : kept) {
    if (fs.f_flag & st) flags |= ms;
  }
  return flags;
}

// Bind-mounts source (a file or a directory) read-only at dir/RANDOM. Error
// messages name neither the source nor the target.
Result<std::string> place_hidden(const std::string& source, const std::string& dir) {
  struct stat st {};
  if (::stat(source.c_str(), &st) != 0) return Status::from_errno(errno, "its files cannot be found or opened");
  auto name = random_name();
  if (!name) return name.status();
  std::string target = dir + "/" + *name;
  if (S_ISDIR(st.st_mode)) {
    if (::mkdir(target.c_str(), 0700) != 0) return Status::from_errno(errno, "cannot create a hidden mount point");
  } else {
    Fd file(::open(target.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
    if (!file.valid()) return Status::from_errno(errno, "cannot create a hidden mount point");
  }
  if (::mount(source.c_str(), target.c_str(), nullptr, MS_BIND | MS_REC, nullptr) != 0) {
    int err = errno;
    S_ISDIR(st.st_mode) ? ::rmdir(target.c_str()) : ::unlink(target.c_str());
    return Status::from_errno(err, "cannot bind-mount its files at a hidden path");
  }
  // Read-only: user code cannot change the model's files through this path.
  if (::mount(nullptr, target.c_str(), nullptr, read_only_remount_flags(target), nullptr) != 0) {
    int err = errno;
    ::umount2(target.c_str(), MNT_DETACH);
    S_ISDIR(st.st_mode) ? ::rmdir(target.c_str()) : ::unlink(target.c_str());
    return Status::from_errno(err, "cannot make its hidden mount read-only");
  }
  return target;
}

}  // namespace

std::vector<kernel::ModelLoad> place_models(const std::vector<kernel::PreloadedModel>& models, const std::string& state_dir,
                                            bool own_mount_namespace) {
  std::vector<kernel::ModelLoad> loads;
  std::string dir = state_dir + "/models";
  for (const auto& spec : models) {
    kernel::ModelLoad load;
    load.spec = spec;
    load.load_path = spec.path;
    load.load_base_model = spec.base_model;
    if (spec.hidden) {
      load.load_path.clear();
      load.load_base_model.clear();
      if (!own_mount_namespace) {
        load.error = "a hidden model is loaded only where the agent is PID 1 of its own mount namespace (a sandbox), "
                     "which can place its files under a path that does not reveal them; not loaded";
      } else if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
        load.error = "cannot create the directory for hidden models: " + std::string(std::strerror(errno));
      } else if (auto placed = place_hidden(spec.path, dir); !placed) {
        load.error = "hidden model: " + placed.status().message();
      } else {
        load.load_path = *placed;
        // A base model given as a path is hidden likewise; a model id (no '/') is passed on as is.
        if (!spec.base_model.empty() && spec.base_model[0] == '/') {
          auto base = place_hidden(spec.base_model, dir);
          if (!base) {
            load.error = "hidden model's base_model: " + base.status().message();
          } else {
            load.load_base_model = *base;
          }
        } else {
          load.load_base_model = spec.base_model;
        }
      }
    }
    loads.push_back(std::move(load));
  }
  return loads;
}

}  // namespace gpubox
