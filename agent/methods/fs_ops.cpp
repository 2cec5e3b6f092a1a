#include "agent/methods/fs_ops.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <set>
#include <utility>
#include <vector>

namespace gpubox::fs {
namespace {

using nlohmann::json;

constexpr mode_t kParentMode = 0755;
// remove_entry recurses once per level on a worker thread's stack.
constexpr int kMaxRemoveDepth = 2048;

// "params.FIELD: cannot ACTION PATH: strerror", with the code errno maps to.
Status errno_status(int err, std::string_view field, std::string_view action, const std::string& path) {
  std::string context = "params.";
  context += field;
  context += ": cannot ";
  context += action;
  context += " ";
  context += path;
  return Status::from_errno(err, context);
}

Status invalid(std::string_view field, const std::string& what) {
  return Status(ErrorCode::invalid_request, "params." + std::string(field) + ": " + what);
}

// The path without trailing slashes ("/" stays "/").
std::string trimmed(const std::string& path) {
  std::string out = path;
  while (out.size() > 1 && out.back() == '/') out.pop_back();
  return out;
}

// The directory holding path ("/" for "/x").
std::string parent_of(const std::string& path) {
  auto slash = path.rfind('/');
  return slash == 0 || slash == std::string::npos ? "/" : path.substr(0, slash);
}

std::string base_of(const std::string& path) {
  auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string join(const std::string& dir, const std::string& name) {
  return dir == "/" ? "/" + name : dir + "/" + name;
}

double mtime_of(const struct stat& st) {
  return static_cast<double>(st.st_mtim.tv_sec) + static_cast<double>(st.st_mtim.tv_nsec) / 1e9;
}

// The names in an open directory (without . and ..), sorted. Leaves dir_fd open.
Result<std::vector<std::string>> read_names(int dir_fd, const std::string& shown) {
  int copy = ::fcntl(dir_fd, F_DUPFD_CLOEXEC, 0);
  if (copy < 0) return errno_status(errno, "path", "read directory", shown);
  DIR* dir = ::fdopendir(copy);
  if (!dir) {
    int err = errno;
    ::close(copy);
    return errno_status(err, "path", "read directory", shown);
  }
  ::rewinddir(dir);
  std::vector<std::string> names;
  errno = 0;
  while (dirent* entry = ::readdir(dir)) {
    std::string_view name(entry->d_name);
    if (name != "." && name != "..") names.emplace_back(name);
    errno = 0;
  }
  int err = errno;
  ::closedir(dir);
  if (err != 0) return errno_status(err, "path", "read directory", shown);
  std::sort(names.begin(), names.end());
  return names;
}

// rename(2), refusing to replace an existing target unless overwrite. Falls
// back to a check and a plain rename on filesystems without RENAME_NOREPLACE.
int rename_into_place(const std::string& from, const std::string& to, bool overwrite) {
  if (overwrite) return ::rename(from.c_str(), to.c_str());
  if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_NOREPLACE) == 0) return 0;
  if (errno != EINVAL) return -1;
  struct stat st;
  if (::lstat(to.c_str(), &st) == 0) {
    errno = EEXIST;
    return -1;
  }
  return ::rename(from.c_str(), to.c_str());
}

// Removes name (relative to dir_fd) and, for a directory, everything below
// it, staying on filesystem dev. level counts the directories above name.
Status remove_entry(int dir_fd, const std::string& name, dev_t dev, const std::string& shown, int level = 0) {
  struct stat st;
  if (::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    return errno == ENOENT ? Status::ok() : errno_status(errno, "path", "inspect", shown);
  }
  if (!S_ISDIR(st.st_mode)) {
    if (::unlinkat(dir_fd, name.c_str(), 0) != 0 && errno != ENOENT) return errno_status(errno, "path", "remove", shown);
    return Status::ok();
  }
  if (st.st_dev != dev) {
    return Status(ErrorCode::busy, "params.path: " + shown + " is a mount point; unmount it first (nothing below it was removed)");
  }
  if (level >= kMaxRemoveDepth) {
    return Status(ErrorCode::resource_exhausted, "params.path: the tree is deeper than " + std::to_string(kMaxRemoveDepth) +
                                                     " levels at " + shown + "; remove its deepest part first");
  }
  Fd child(::openat(dir_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!child.valid()) return errno_status(errno, "path", "open directory", shown);
  auto names = read_names(child.get(), shown);
  if (!names) return names.status();
  for (const auto& entry : *names) {
    if (Status removed = remove_entry(child.get(), entry, dev, join(shown, entry), level + 1); !removed) return removed;
  }
  child.reset();
  if (::unlinkat(dir_fd, name.c_str(), AT_REMOVEDIR) != 0 && errno != ENOENT) {
    if (errno == EBUSY) return Status(ErrorCode::busy, "params.path: " + shown + " is a mount point; unmount it first");
    return errno_status(errno, "path", "remove directory", shown);
  }
  return Status::ok();
}

// Removes path and everything below it; for cleaning up staged copies.
void remove_quietly(const std::string& path) {
  std::string parent = parent_of(path);
  Fd dir(::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  struct stat st;
  if (dir.valid() && ::lstat(path.c_str(), &st) == 0) (void)remove_entry(dir.get(), base_of(path), st.st_dev, path);
}

Status write_all(int fd, const char* data, std::size_t size, const std::string& shown) {
  if (int failed = write_fully(fd, data, size)) return errno_status(failed, "path", "write", shown);
  return Status::ok();
}

// Copies a regular file's bytes, mode, owner (best effort) and times.
Status copy_file(const std::string& from, const struct stat& st, const std::string& to) {
  Fd in(::open(from.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!in.valid()) return errno_status(errno, "from", "open", from);
  Fd out(::open(to.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  if (!out.valid()) return errno_status(errno, "to", "create", to);
  std::vector<char> buffer(1 << 20);
  while (true) {
    ssize_t n = ::read(in.get(), buffer.data(), buffer.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno_status(errno, "from", "read", from);
    }
    if (n == 0) break;
    if (Status written = write_all(out.get(), buffer.data(), static_cast<std::size_t>(n), to); !written) return written;
  }
  [[maybe_unused]] int owned = ::fchown(out.get(), st.st_uid, st.st_gid);
  if (::fchmod(out.get(), st.st_mode & 07777) != 0) return errno_status(errno, "to", "set the mode of", to);
  const struct timespec times[2] = {st.st_atim, st.st_mtim};
  if (::futimens(out.get(), times) != 0) return errno_status(errno, "to", "set the times of", to);
  if (::fsync(out.get()) != 0) return errno_status(errno, "to", "fsync", to);
  return Status::ok();
}

// Copies from (file, symlink or directory tree) to the new path to.
Status copy_entry(const std::string& from, const std::string& to) {
  struct stat st;
  if (::lstat(from.c_str(), &st) != 0) return errno_status(errno, "from", "inspect", from);
  if (S_ISREG(st.st_mode)) return copy_file(from, st, to);
  const struct timespec times[2] = {st.st_atim, st.st_mtim};
  if (S_ISLNK(st.st_mode)) {
    std::string target(static_cast<std::size_t>(st.st_size) + 1, '\0');
    ssize_t n = ::readlink(from.c_str(), target.data(), target.size());
    if (n < 0) return errno_status(errno, "from", "read the symlink", from);
    target.resize(static_cast<std::size_t>(n));
    if (::symlink(target.c_str(), to.c_str()) != 0) return errno_status(errno, "to", "create a symlink at", to);
    [[maybe_unused]] int owned = ::lchown(to.c_str(), st.st_uid, st.st_gid);
    ::utimensat(AT_FDCWD, to.c_str(), times, AT_SYMLINK_NOFOLLOW);
    return Status::ok();
  }
  if (!S_ISDIR(st.st_mode)) {
    return invalid("from", from + " is a special file (" + std::string(type_name(st.st_mode)) +
                               "); only files, directories and symlinks can be moved across filesystems");
  }
  if (::mkdir(to.c_str(), 0700) != 0) return errno_status(errno, "to", "create directory", to);
  Fd dir(::open(from.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!dir.valid()) return errno_status(errno, "from", "open directory", from);
  auto names = read_names(dir.get(), from);
  if (!names) return names.status();
  for (const auto& name : *names) {
    if (Status copied = copy_entry(join(from, name), join(to, name)); !copied) return copied;
  }
  [[maybe_unused]] int owned = ::chown(to.c_str(), st.st_uid, st.st_gid);
  if (::chmod(to.c_str(), st.st_mode & 07777) != 0) return errno_status(errno, "to", "set the mode of", to);
  ::utimensat(AT_FDCWD, to.c_str(), times, 0);
  return Status::ok();
}

// Moves across filesystems: copy into a staging directory beside to, rename
// the copy into place, remove the source.
Status move_across(const std::string& from, const std::string& to, bool overwrite) {
  std::string staging = join(parent_of(to), ".gpubox-move-XXXXXX");
  if (!::mkdtemp(staging.data())) return errno_status(errno, "to", "create a staging directory beside", to);
  std::string staged = staging + "/entry";
  Status moved = copy_entry(from, staged);
  if (moved) {
    if (rename_into_place(staged, to, overwrite) != 0) {
      if (errno == EEXIST && !overwrite) {
        moved = Status(ErrorCode::already_exists, "params.to: " + to + " already exists; pass overwrite: true to replace it");
      } else if (errno == EEXIST || errno == ENOTEMPTY) {
        moved = invalid("to", to + " is a directory that is not empty; remove it first (fs.remove with recursive)");
      } else {
        moved = errno_status(errno, "to", "rename the copy into", to);
      }
    } else {
      Fd dir(::open(parent_of(to).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
      if (dir.valid()) ::fsync(dir.get());
    }
  }
  remove_quietly(staging);
  if (!moved) return moved;
  if (Status removed = remove_path(from, true); !removed) {
    return Status(removed.code(), "params.from: copied to " + to + " but could not remove the source: " + removed.message());
  }
  return Status::ok();
}

}  // namespace

std::string_view type_name(mode_t mode) {
  if (S_ISREG(mode)) return "file";
  if (S_ISDIR(mode)) return "dir";
  if (S_ISLNK(mode)) return "symlink";
  return "other";
}

nlohmann::json describe(const struct stat& st) {
  return json{{"type", type_name(st.st_mode)},
              {"size", static_cast<std::uint64_t>(st.st_size)},
              {"mode", static_cast<unsigned>(st.st_mode & 07777)},
              {"mtime", mtime_of(st)}};
}

Result<nlohmann::json> stat_path(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return errno_status(errno, "path", "stat", path);
  json result = describe(st);
  result["uid"] = static_cast<unsigned>(st.st_uid);
  result["gid"] = static_cast<unsigned>(st.st_gid);
  if (S_ISLNK(st.st_mode)) {
    std::string target(static_cast<std::size_t>(st.st_size) + 1, '\0');
    ssize_t n = ::readlink(path.c_str(), target.data(), target.size());
    if (n >= 0) {
      target.resize(static_cast<std::size_t>(n));
      result["target"] = target;
    }
  }
  return result;
}

namespace {

// Depth-first walk for list_tree. State below belongs to one call.
struct Lister {
  int depth = 1;
  std::size_t max_entries = 0;
  json entries = json::array();
  bool truncated = false;
  std::set<std::pair<dev_t, ino_t>> ancestors;  // directories on the current path

  // Lists the directory open as dir_fd. Fails only when it cannot be read;
  // the caller ignores that below the root (listed, not entered).
  Status walk(int dir_fd, const std::string& prefix, int level) {
    auto names = read_names(dir_fd, prefix);
    if (!names) return names.status();
    for (const auto& name : *names) {
      if (truncated) break;
      struct stat st;
      if (::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;  // gone meanwhile
      if (entries.size() >= max_entries) {
        truncated = true;
        break;
      }
      std::string path = prefix == "/" ? "/" + name : prefix + "/" + name;
      json entry = describe(st);
      entry["path"] = path;
      entries.push_back(std::move(entry));
      if (!S_ISDIR(st.st_mode) || level >= depth) continue;
      auto key = std::make_pair(st.st_dev, st.st_ino);
      if (ancestors.count(key)) continue;
      Fd child(::openat(dir_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (!child.valid()) continue;
      ancestors.insert(key);
      (void)walk(child.get(), path, level + 1);
      ancestors.erase(key);
    }
    return Status::ok();
  }
};

}  // namespace

Result<nlohmann::json> list_tree(const std::string& dir, int depth, std::size_t max_entries) {
  std::string root = trimmed(dir);
  Fd fd(::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd.valid()) {
    int err = errno;
    struct stat st;
    if (err == ENOTDIR && ::stat(root.c_str(), &st) == 0) {
      return invalid("path", root + " is a " + std::string(type_name(st.st_mode)) + ", not a directory; fs.stat describes it");
    }
    return errno_status(err, "path", "list", root);
  }
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return errno_status(errno, "path", "list", root);
  Lister lister;
  lister.depth = depth;
  lister.max_entries = max_entries;
  lister.ancestors.insert({st.st_dev, st.st_ino});
  if (Status listed = lister.walk(fd.get(), root, 1); !listed) return listed;
  return json{{"entries", std::move(lister.entries)}, {"truncated", lister.truncated}};
}

Status make_directory(const std::string& path, mode_t mode, bool parents) {
  std::string target = trimmed(path);
  auto exists_as = [](const std::string& p, struct stat* st) { return ::stat(p.c_str(), st) == 0; };
  if (!parents) {
    if (target == "/") return Status(ErrorCode::already_exists, "params.path: / already exists");
    if (::mkdir(target.c_str(), mode) != 0) {
      int err = errno;
      struct stat st;
      if (err == EEXIST) {
        bool is_dir = exists_as(target, &st) && S_ISDIR(st.st_mode);
        return Status(ErrorCode::already_exists,
                      "params.path: " + target + (is_dir ? " already exists (pass parents: true to accept an existing directory)"
                                                         : " already exists and is not a directory"));
      }
      if (err == ENOENT) {
        return Status(ErrorCode::not_found, "params.path: the parent directory " + parent_of(target) +
                                                " does not exist; pass parents: true to create it");
      }
      if (err == ENOTDIR) return invalid("path", "a component of " + parent_of(target) + " is not a directory");
      return errno_status(err, "path", "create directory", target);
    }
    if (::chmod(target.c_str(), mode) != 0) return errno_status(errno, "path", "set the mode of", target);
    return Status::ok();
  }
  // With parents: create each missing component in turn, like mkdir -p.
  std::size_t next = 1;
  while (true) {
    std::size_t slash = target.find('/', next);
    bool last = slash == std::string::npos;
    std::string prefix = last ? target : target.substr(0, slash);
    next = last ? target.size() : slash + 1;
    if (prefix == "/" || prefix.empty() || prefix.back() == '/') {
      if (last) return Status::ok();
      continue;  // "//" in the path
    }
    if (::mkdir(prefix.c_str(), last ? mode : kParentMode) == 0) {
      if (last && ::chmod(prefix.c_str(), mode) != 0) return errno_status(errno, "path", "set the mode of", prefix);
    } else {
      int err = errno;
      struct stat st;
      if (exists_as(prefix, &st)) {
        if (!S_ISDIR(st.st_mode)) {
          if (last) return Status(ErrorCode::already_exists, "params.path: " + prefix + " already exists and is not a directory");
          return invalid("path", prefix + " is a " + std::string(type_name(st.st_mode)) + ", not a directory");
        }
      } else if (err == ENOTDIR) {
        return invalid("path", "a component of " + prefix + " is not a directory");
      } else {
        return errno_status(err, "path", "create directory", prefix);
      }
    }
    if (last) return Status::ok();
  }
}

Status remove_path(const std::string& path, bool recursive) {
  std::string target = trimmed(path);
  if (target == "/") return invalid("path", "refusing to remove /");
  struct stat st;
  if (::lstat(target.c_str(), &st) != 0) return errno_status(errno, "path", "remove", target);
  if (!S_ISDIR(st.st_mode)) {
    if (::unlink(target.c_str()) != 0) return errno_status(errno, "path", "remove", target);
    return Status::ok();
  }
  if (!recursive) {
    if (::rmdir(target.c_str()) != 0) {
      if (errno == ENOTEMPTY || errno == EEXIST) {
        return invalid("recursive", target + " is a directory that is not empty; pass recursive: true to remove it with everything below it");
      }
      if (errno == EBUSY) return Status(ErrorCode::busy, "params.path: " + target + " is a mount point; unmount it first");
      return errno_status(errno, "path", "remove directory", target);
    }
    return Status::ok();
  }
  std::string parent = parent_of(target);
  Fd dir(::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir.valid()) return errno_status(errno, "path", "open directory", parent);
  return remove_entry(dir.get(), base_of(target), st.st_dev, target);
}

Status move_path(const std::string& from_path, const std::string& to_path, bool overwrite) {
  std::string from = trimmed(from_path), to = trimmed(to_path);
  if (from == "/") return invalid("from", "refusing to move /");
  if (to == "/") return invalid("to", "refusing to replace /");
  struct stat from_st, to_st;
  if (::lstat(from.c_str(), &from_st) != 0) return errno_status(errno, "from", "move", from);
  if (::lstat(to.c_str(), &to_st) == 0) {
    if (from_st.st_dev == to_st.st_dev && from_st.st_ino == to_st.st_ino) return Status::ok();  // same file
    if (!overwrite) return Status(ErrorCode::already_exists, "params.to: " + to + " already exists; pass overwrite: true to replace it");
    if (S_ISDIR(to_st.st_mode) && !S_ISDIR(from_st.st_mode)) {
      return invalid("to", to + " is a directory and " + from + " is not; only a directory can replace a directory");
    }
    if (!S_ISDIR(to_st.st_mode) && S_ISDIR(from_st.st_mode)) {
      return invalid("to", to + " is a " + std::string(type_name(to_st.st_mode)) + " and " + from +
                               " is a directory; a directory can replace only an empty directory");
    }
  }
  if (rename_into_place(from, to, overwrite) == 0) return Status::ok();
  switch (errno) {
    case EEXIST:
      if (!overwrite) return Status(ErrorCode::already_exists, "params.to: " + to + " already exists; pass overwrite: true to replace it");
      [[fallthrough]];
    case ENOTEMPTY:
      return invalid("to", to + " is a directory that is not empty; remove it first (fs.remove with recursive)");
    case EINVAL:
      return invalid("to", "cannot move the directory " + from + " into itself (" + to + ")");
    case ENOENT:
      return Status(ErrorCode::not_found, "params.to: the parent directory " + parent_of(to) + " does not exist");
    case EXDEV:
      return move_across(from, to, overwrite);
    default:
      return errno_status(errno, "to", "move " + from + " to", to);
  }
}

AtomicFile::AtomicFile(std::string target, std::string temp, Fd fd)
    : target_(std::move(target)), temp_(std::move(temp)), fd_(std::move(fd)) {}

AtomicFile::~AtomicFile() {
  if (!committed_) ::unlink(temp_.c_str());
}

Result<std::unique_ptr<AtomicFile>> AtomicFile::create(const std::string& path, mode_t mode, bool parents) {
  std::string target = trimmed(path);
  std::string base = base_of(target);
  if (target == "/" || base == "." || base == "..") return invalid("path", "\"" + path + "\" names no file");
  struct stat st;
  if (::lstat(target.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    return invalid("path", target + " is a directory; give the path of a file");
  }
  std::string parent = parent_of(target);
  if (::stat(parent.c_str(), &st) != 0) {
    int err = errno;
    if (err == ENOENT && parents) {
      if (Status made = make_directory(parent, kParentMode, true); !made) return made;
    } else if (err == ENOENT) {
      return Status(ErrorCode::not_found, "params.path: the parent directory " + parent + " does not exist; pass parents: true to create it");
    } else if (err == ENOTDIR) {
      return invalid("path", "a component of " + parent + " is not a directory");
    } else {
      return errno_status(err, "path", "write into", parent);
    }
  } else if (!S_ISDIR(st.st_mode)) {
    return invalid("path", parent + " is a " + std::string(type_name(st.st_mode)) + ", not a directory");
  }
  // A hidden name beside the target, short enough for NAME_MAX.
  std::string temp = join(parent, "." + base.substr(0, 200) + ".gpubox-XXXXXX");
  Fd fd(::mkostemp(temp.data(), O_CLOEXEC));
  if (!fd.valid()) return errno_status(errno, "path", "create a file in", parent);
  if (::fchmod(fd.get(), mode) != 0) {
    int err = errno;
    ::unlink(temp.c_str());
    return errno_status(err, "mode", "set the mode of", temp);
  }
  return std::unique_ptr<AtomicFile>(new AtomicFile(target, std::move(temp), std::move(fd)));
}

Status AtomicFile::write(std::shared_ptr<const void> owner, const void* data, std::size_t size) {
  hash_.update(std::move(owner), data, size);
  if (Status written = write_all(fd_.get(), static_cast<const char*>(data), size, target_); !written) return written;
  size_ += size;
  // Start writeback as the bytes arrive, so that commit()'s fsync waits for
  // the last few MiB rather than the whole file (the kernel would otherwise
  // hold up to dirty_background_ratio of RAM back).
  if (size_ - flushed_ >= kWritebackBytes) {
    ::sync_file_range(fd_.get(), static_cast<off_t>(flushed_), static_cast<off_t>(size_ - flushed_), SYNC_FILE_RANGE_WRITE);
    flushed_ = size_;
  }
  return Status::ok();
}

Status AtomicFile::commit() {
  if (::fsync(fd_.get()) != 0) return errno_status(errno, "path", "fsync", temp_);
  if (::close(fd_.release()) != 0) return errno_status(errno, "path", "close", temp_);
  if (::rename(temp_.c_str(), target_.c_str()) != 0) return errno_status(errno, "path", "rename into", target_);
  committed_ = true;
  Fd dir(::open(parent_of(target_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir.valid() || ::fsync(dir.get()) != 0) {
    return errno_status(errno, "path", "fsync the directory of (the new content is in place but may not survive a crash)", target_);
  }
  return Status::ok();
}

}  // namespace gpubox::fs
