#include "base/safe_extractor.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <memory>
#include <set>
#include <vector>

#include "base/sha256.h"

namespace gpubox::harvest {
namespace {

struct ReaderFree {
  void operator()(struct archive* a) const { archive_read_free(a); }
};
using Reader = std::unique_ptr<struct archive, ReaderFree>;

// An owned descriptor.
class Dir {
 public:
  explicit Dir(int fd = -1) : fd_(fd) {}
  Dir(Dir&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  Dir& operator=(Dir&& other) noexcept {
    if (this != &other) {
      if (fd_ >= 0) ::close(fd_);
      fd_ = other.fd_;
      other.fd_ = -1;
    }
    return *this;
  }
  Dir(const Dir&) = delete;
  Dir& operator=(const Dir&) = delete;
  ~Dir() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }

 private:
  int fd_;
};

Status refuse(const std::string& entry, const std::string& why) {
  return Status(ErrorCode::invalid_request, "archive entry \"" + entry.substr(0, 200) + "\": " + why + "; nothing was extracted");
}

std::vector<std::string> split(const std::string& path) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  while (start <= path.size()) {
    std::size_t slash = path.find('/', start);
    if (slash == std::string::npos) slash = path.size();
    parts.push_back(path.substr(start, slash - start));
    start = slash + 1;
  }
  return parts;
}

// Whether a symlink at link_path with this target stays inside the root, judged lexically.
bool link_stays_inside(const std::string& link_path, const std::string& target) {
  if (target.empty() || target[0] == '/') return false;
  std::vector<std::string> stack = split(link_path);
  stack.pop_back();  // the link's own name: the target is relative to its directory
  for (const auto& part : split(target)) {
    if (part.empty() || part == ".") continue;
    if (part == "..") {
      if (stack.empty()) return false;
      stack.pop_back();
    } else {
      stack.push_back(part);
    }
  }
  return true;
}

// Opens (creating when asked) each directory of `parts` below root without
// following a symlink anywhere: a path through a symlink fails.
Result<Dir> open_parent(int root, const std::vector<std::string>& parts, const std::string& entry) {
  Dir current(::fcntl(root, F_DUPFD_CLOEXEC, 0));
  for (std::size_t i = 0; i + 1 < parts.size(); ++i) {
    int fd = ::openat(current.get(), parts[i].c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT) {
      if (::mkdirat(current.get(), parts[i].c_str(), 0755) != 0 && errno != EEXIST) {
        return Status::from_errno(errno, "cannot create the directory of " + entry);
      }
      fd = ::openat(current.get(), parts[i].c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    }
    if (fd < 0) {
      if (errno == ELOOP || errno == ENOTDIR) return refuse(entry, "its path goes through a symlink or a file");
      return Status::from_errno(errno, "cannot open the directory of " + entry);
    }
    current = Dir(fd);
  }
  return current;
}

// One archive's extraction below root; with layer set, an upper layer's (extract_layer).
class Extraction {
 public:
  Extraction(int root, const ExtractLimits& limits, const LayerIds* layer) : root_(root), limits_(limits), layer_(layer) {}

  Status entry(struct archive* a, archive_entry* entry) {
    const char* raw = archive_entry_pathname(entry);
    std::string name = raw ? raw : "";
    if (++entries_ > limits_.max_entries) {
      return Status(ErrorCode::resource_exhausted, "the archive has more than " + std::to_string(limits_.max_entries) +
                                                       " entries (the extractor's cap); nothing was extracted");
    }
    std::string path;
    if (name.empty()) return refuse(name, "empty path");
    if (name[0] == '/') return refuse(name, "absolute path");
    if (!normalize_entry_path(name, &path)) return refuse(name, "path with \"..\" or an empty component");
    if (path.empty()) return Status::ok();  // "./" itself
    mode_t type = archive_entry_filetype(entry);
    mode_t mode = archive_entry_perm(entry);
    if (!layer_ && (archive_entry_mode(entry) & (S_ISUID | S_ISGID))) return refuse(name, "setuid or setgid bit");
    const char* hardlink = archive_entry_hardlink(entry);
    bool whiteout = layer_ && !hardlink && type == AE_IFCHR && archive_entry_rdev(entry) == 0;
    if (layer_ && !hardlink) {
      if (Status checked = check_layer_entry(entry, name, type); !checked) return checked;
    }
    if (!hardlink && !whiteout && type != AE_IFREG && type != AE_IFDIR && type != AE_IFLNK) {
      return refuse(name, type == AE_IFCHR || type == AE_IFBLK ? "device file" : "FIFO, socket or other special file");
    }
    if (!seen_.insert(path).second && type != AE_IFDIR) return refuse(name, "duplicate entry");
    std::vector<std::string> parts = split(path);
    auto parent = open_parent(root_, parts, name);
    if (!parent) return parent.status();
    const std::string& leaf = parts.back();

    if (hardlink) {
      std::string target;
      if (!normalize_entry_path(hardlink, &target) || target.empty() || !files_.count(target)) {
        return refuse(name, "hard link to \"" + std::string(hardlink).substr(0, 200) +
                                "\", which is not a file extracted before it");
      }
      std::vector<std::string> target_parts = split(target);
      auto target_parent = open_parent(root_, target_parts, name);
      if (!target_parent) return target_parent.status();
      if (::linkat(target_parent->get(), target_parts.back().c_str(), parent->get(), leaf.c_str(), 0) != 0) {
        return Status::from_errno(errno, "cannot create the hard link " + name);
      }
      ++report_.hardlinks;
      return Status::ok();
    }
    if (whiteout) {
      if (::mknodat(parent->get(), leaf.c_str(), S_IFCHR, makedev(0, 0)) != 0) {
        return Status::from_errno(errno, "cannot create the whiteout " + name);
      }
      ++report_.whiteouts;
      return keep_metadata(*parent, leaf, entry, path, type, name);
    }
    switch (type) {
      case AE_IFDIR: {
        if (::mkdirat(parent->get(), leaf.c_str(), (mode & 0777) | 0700) != 0 && errno != EEXIST) {
          return Status::from_errno(errno, "cannot create the directory " + name);
        }
        struct stat st;
        if (::fstatat(parent->get(), leaf.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(st.st_mode)) {
          return refuse(name, "a directory where the archive already put a file or symlink");
        }
        ++report_.dirs;
        return layer_ ? keep_metadata(*parent, leaf, entry, path, type, name) : Status::ok();
      }
      case AE_IFLNK: {
        const char* target = archive_entry_symlink(entry);
        std::string link_target = target ? target : "";
        if (!link_stays_inside(path, link_target)) {
          return refuse(name, "symlink pointing outside the destination (\"" + link_target.substr(0, 200) + "\")");
        }
        if (::symlinkat(link_target.c_str(), parent->get(), leaf.c_str()) != 0) {
          return Status::from_errno(errno, "cannot create the symlink " + name);
        }
        ++report_.symlinks;
        return layer_ ? keep_metadata(*parent, leaf, entry, path, type, name) : Status::ok();
      }
      default: {
        Status written = write_file(a, entry, *parent, leaf, name, path, mode);
        if (!written || !layer_) return written;
        return keep_metadata(*parent, leaf, entry, path, type, name);
      }
    }
  }

  // Sets the directories' mtimes, once nothing is created in them any more (innermost first).
  Status finish() {
    for (auto it = dir_times_.rbegin(); it != dir_times_.rend(); ++it) {
      std::vector<std::string> parts = split(it->first);
      auto parent = open_parent(root_, parts, it->first);
      if (!parent) return parent.status();
      timespec times[2] = {{0, UTIME_OMIT}, it->second};
      if (::utimensat(parent->get(), parts.back().c_str(), times, AT_SYMLINK_NOFOLLOW) != 0) {
        return Status::from_errno(errno, "cannot set the time of " + it->first);
      }
    }
    return Status::ok();
  }

  const ExtractReport& report() const { return report_; }

 private:
  // What an upper layer's entry may be: ids in range, only allowed xattrs, and those on files and directories only.
  Status check_layer_entry(archive_entry* entry, const std::string& name, mode_t type) const {
    if (archive_entry_uid(entry) < 0 || static_cast<std::uint64_t>(archive_entry_uid(entry)) >= layer_->count ||
        archive_entry_gid(entry) < 0 || static_cast<std::uint64_t>(archive_entry_gid(entry)) >= layer_->count) {
      return refuse(name, "owner " + std::to_string(archive_entry_uid(entry)) + ":" + std::to_string(archive_entry_gid(entry)) +
                              " outside the sandbox's " + std::to_string(layer_->count) + " ids");
    }
    if (archive_entry_xattr_reset(entry) > 0 && type != AE_IFREG && type != AE_IFDIR) {
      return refuse(name, "extended attributes on a special file");
    }
    const char* xattr_name = nullptr;
    const void* value = nullptr;
    std::size_t size = 0;
    while (archive_entry_xattr_next(entry, &xattr_name, &value, &size) == ARCHIVE_OK) {
      if (!layer_xattr_kept(xattr_name, value, size)) {
        return refuse(name, std::string("extended attribute \"") + xattr_name + "\" (a layer keeps only trusted.overlay.opaque=y and user.*)");
      }
    }
    return Status::ok();
  }

  // The owner, mode (setuid/setgid only on directories), xattrs and mtime of a layer's entry just created.
  Status keep_metadata(const Dir& parent, const std::string& leaf, archive_entry* entry, const std::string& path, mode_t type,
                       const std::string& name) {
    uid_t uid = static_cast<uid_t>(layer_->uid_base + static_cast<std::uint64_t>(archive_entry_uid(entry)));
    gid_t gid = static_cast<gid_t>(layer_->gid_base + static_cast<std::uint64_t>(archive_entry_gid(entry)));
    if (::fchownat(parent.get(), leaf.c_str(), uid, gid, AT_SYMLINK_NOFOLLOW) != 0) {
      return Status::from_errno(errno, "cannot set the owner of " + name);
    }
    if (type != AE_IFLNK) {
      mode_t perm = archive_entry_perm(entry) & 07777;
      if (type != AE_IFDIR && (perm & (S_ISUID | S_ISGID))) {
        perm &= static_cast<mode_t>(~(S_ISUID | S_ISGID));
        ++report_.setid_cleared;
      }
      if (::fchmodat(parent.get(), leaf.c_str(), perm, 0) != 0) return Status::from_errno(errno, "cannot set the mode of " + name);
    }
    if (Status kept = keep_xattrs(parent, leaf, entry, type, name); !kept) return kept;
    timespec mtime{archive_entry_mtime(entry), archive_entry_mtime_nsec(entry)};
    if (type == AE_IFDIR) {
      dir_times_.emplace_back(path, mtime);
      return Status::ok();
    }
    timespec times[2] = {{0, UTIME_OMIT}, mtime};
    if (::utimensat(parent.get(), leaf.c_str(), times, AT_SYMLINK_NOFOLLOW) != 0) {
      return Status::from_errno(errno, "cannot set the time of " + name);
    }
    return Status::ok();
  }

  // The entry's (checked) xattrs on the file or directory just created.
  Status keep_xattrs(const Dir& parent, const std::string& leaf, archive_entry* entry, mode_t type, const std::string& name) {
    if (archive_entry_xattr_reset(entry) == 0 || (type != AE_IFREG && type != AE_IFDIR)) return Status::ok();
    Dir target(::openat(parent.get(), leaf.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | (type == AE_IFDIR ? O_DIRECTORY : 0)));
    if (!target.valid()) return Status::from_errno(errno, "cannot open " + name);
    const char* xattr_name = nullptr;
    const void* value = nullptr;
    std::size_t size = 0;
    while (archive_entry_xattr_next(entry, &xattr_name, &value, &size) == ARCHIVE_OK) {
      if (::fsetxattr(target.get(), xattr_name, value, size, 0) != 0) {
        return Status::from_errno(errno, std::string("cannot set the extended attribute ") + xattr_name + " of " + name);
      }
    }
    return Status::ok();
  }

  Status write_file(struct archive* a, archive_entry* entry, const Dir& parent, const std::string& leaf,
                    const std::string& name, const std::string& path, mode_t mode) {
    if (archive_entry_size_is_set(entry) && archive_entry_size(entry) > 0 &&
        report_.bytes + static_cast<std::uint64_t>(archive_entry_size(entry)) > limits_.max_total_bytes) {
      return bomb();
    }
    Dir file(::openat(parent.get(), leaf.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, (mode & 0777) | 0600));
    if (!file.valid()) {
      if (errno == EEXIST) return refuse(name, "a file where the archive already put something");
      return Status::from_errno(errno, "cannot create " + name);
    }
    char buffer[1 << 16];
    while (true) {
      la_ssize_t n = archive_read_data(a, buffer, sizeof buffer);
      if (n == 0) break;
      if (n < 0) return Status(ErrorCode::invalid_request, "corrupt archive at \"" + name + "\": " + archive_error_string(a));
      report_.bytes += static_cast<std::uint64_t>(n);
      if (report_.bytes > limits_.max_total_bytes) return bomb();
      std::size_t done = 0;
      while (done < static_cast<std::size_t>(n)) {
        ssize_t w = ::write(file.get(), buffer + done, static_cast<std::size_t>(n) - done);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) return Status::from_errno(errno, "cannot write " + name);
        done += static_cast<std::size_t>(w);
      }
    }
    files_.insert(path);
    ++report_.files;
    return Status::ok();
  }

  Status bomb() const {
    return Status(ErrorCode::resource_exhausted, "the archive expands to more than " + std::to_string(limits_.max_total_bytes) +
                                                     " bytes (the extractor's cap; a decompression bomb?); nothing was extracted");
  }

  int root_;
  ExtractLimits limits_;
  const LayerIds* layer_;  // null: a plain extraction
  ExtractReport report_;
  std::vector<std::pair<std::string, timespec>> dir_times_;
  std::uint64_t entries_ = 0;
  std::set<std::string> seen_;
  std::set<std::string> files_;
};

Result<ExtractReport> extract(Reader reader, const std::string& dest, const ExtractLimits& limits,
                              const LayerIds* layer = nullptr) {
  if (::mkdir(dest.c_str(), 0755) != 0) {
    if (errno == EEXIST) return Status(ErrorCode::already_exists, dest + " exists: extract into a new directory");
    return Status::from_errno(errno, "cannot create " + dest);
  }
  Dir root(::open(dest.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  Status status = root.valid() ? Status::ok() : Status::from_errno(errno, "cannot open " + dest);
  Extraction extraction(root.get(), limits, layer);
  while (status) {
    archive_entry* entry = nullptr;
    int r = archive_read_next_header(reader.get(), &entry);
    if (r == ARCHIVE_EOF) break;
    if (r < ARCHIVE_WARN) {
      status = Status(ErrorCode::invalid_request, std::string("corrupt or unsupported archive: ") +
                                                      (archive_error_string(reader.get()) ? archive_error_string(reader.get()) : "unreadable header"));
      break;
    }
    status = extraction.entry(reader.get(), entry);
  }
  if (status) status = extraction.finish();
  if (!status) {
    std::error_code error;
    std::filesystem::remove_all(dest, error);  // never follows symlinks
    return status;
  }
  return extraction.report();
}

Reader make_reader() {
  Reader reader(archive_read_new());
  if (!reader) return reader;
  archive_read_support_filter_zstd(reader.get());
  archive_read_support_filter_gzip(reader.get());
  archive_read_support_filter_xz(reader.get());
  archive_read_support_filter_none(reader.get());
  archive_read_support_format_tar(reader.get());
  return reader;
}

}  // namespace

bool layer_xattr_kept(const std::string& name, const void* value, std::size_t size) {
  if (name == "trusted.overlay.opaque") return size == 1 && *static_cast<const char*>(value) == 'y';
  return name.rfind("user.", 0) == 0;
}

bool normalize_entry_path(const std::string& path, std::string* normal) {
  std::string out;
  std::vector<std::string> parts = split(path);
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const std::string& part = parts[i];
    if (part == "..") return false;
    if (part == ".") continue;
    if (part.empty()) {
      if (i + 1 == parts.size() && i > 0) continue;  // a trailing slash (directories)
      return false;
    }
    if (!out.empty()) out += "/";
    out += part;
  }
  *normal = out;
  return true;
}

namespace {

Result<ExtractReport> extract_file(const std::string& archive_path, const std::string& dest, const ExtractLimits& limits,
                                   const LayerIds* layer) {
  Reader reader = make_reader();
  if (!reader) return Status(ErrorCode::resource_exhausted, "out of memory for the archive reader");
  if (archive_read_open_filename(reader.get(), archive_path.c_str(), 1 << 20) != ARCHIVE_OK) {
    return Status(ErrorCode::invalid_request, "cannot open the archive " + archive_path + ": " + archive_error_string(reader.get()));
  }
  return extract(std::move(reader), dest, limits, layer);
}

}  // namespace

Result<ExtractReport> extract_archive(const std::string& archive_path, const std::string& dest, const ExtractLimits& limits) {
  return extract_file(archive_path, dest, limits, nullptr);
}

Result<ExtractReport> extract_layer(const std::string& archive_path, const std::string& dest, const LayerIds& ids,
                                    const ExtractLimits& limits) {
  return extract_file(archive_path, dest, limits, &ids);
}

Result<ExtractReport> extract_archive_memory(const void* data, std::size_t size, const std::string& dest,
                                             const ExtractLimits& limits) {
  Reader reader = make_reader();
  if (!reader) return Status(ErrorCode::resource_exhausted, "out of memory for the archive reader");
  if (archive_read_open_memory(reader.get(), data, size) != ARCHIVE_OK) {
    return Status(ErrorCode::invalid_request, std::string("cannot read the archive: ") + archive_error_string(reader.get()));
  }
  return extract(std::move(reader), dest, limits);
}

Status verify_manifest(const std::string& dest, const nlohmann::json& manifest) {
  if (!manifest.is_object() || !manifest.contains("files") || !manifest["files"].is_array()) {
    return Status(ErrorCode::invalid_request, "the manifest has no \"files\" list");
  }
  for (const auto& item : manifest["files"]) {
    if (item.value("type", "file") != "file") continue;
    std::string relative;
    if (!normalize_entry_path(item.value("path", ""), &relative) || relative.empty()) {
      return Status(ErrorCode::invalid_request, "manifest path \"" + item.value("path", "") + "\" is not a safe relative path");
    }
    std::string path = dest + "/" + relative;
    int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return Status::from_errno(errno, "manifest file " + relative + " is missing from " + dest);
    Sha256 hash;
    std::uint64_t size = 0;
    char buffer[1 << 16];
    ssize_t n;
    while ((n = ::read(fd, buffer, sizeof buffer)) > 0) {
      hash.update(buffer, static_cast<std::size_t>(n));
      size += static_cast<std::uint64_t>(n);
    }
    ::close(fd);
    std::string digest = hash.hex_digest();
    if (size != item.value("size", std::uint64_t{0}) || digest != item.value("sha256", "")) {
      return Status(ErrorCode::input_changed, relative + ": " + std::to_string(size) + " bytes, sha256 " + digest +
                                                  "; the manifest says " + std::to_string(item.value("size", std::uint64_t{0})) +
                                                  " bytes, " + item.value("sha256", ""));
    }
  }
  return Status::ok();
}

}  // namespace gpubox::harvest
