#include "host/backends/local/layer_archive.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <map>
#include <memory>
#include <utility>

#include "base/fd.h"
#include "base/safe_extractor.h"
#include "base/sha256.h"

namespace gpubox::host {
namespace {

constexpr std::uint32_t kNobody = 65534;

struct WriterFree {
  void operator()(struct archive* a) const { archive_write_free(a); }
};
struct EntryFree {
  void operator()(archive_entry* entry) const { archive_entry_free(entry); }
};
using Entry = std::unique_ptr<archive_entry, EntryFree>;

// The names in a directory, sorted (the archive is the same for the same layer).
Result<std::vector<std::string>> list_names(int dir_fd, const std::string& where) {
  int copy = ::openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR* dir = copy >= 0 ? ::fdopendir(copy) : nullptr;
  if (!dir) {
    if (copy >= 0) ::close(copy);
    return Status::from_errno(errno, "cannot list '" + where + "'");
  }
  std::vector<std::string> names;
  while (dirent* item = ::readdir(dir)) {
    std::string name = item->d_name;
    if (name != "." && name != "..") names.push_back(std::move(name));
  }
  ::closedir(dir);
  std::sort(names.begin(), names.end());
  return names;
}

// The xattrs of an open file or directory that a layer keeps (layer_xattr_kept).
Status add_xattrs(int fd, archive_entry* entry, const std::string& where) {
  ssize_t length = ::flistxattr(fd, nullptr, 0);
  if (length < 0) return errno == ENOTSUP ? Status::ok() : Status::from_errno(errno, "cannot list the xattrs of '" + where + "'");
  std::string names(static_cast<size_t>(length), '\0');
  length = ::flistxattr(fd, names.data(), names.size());
  if (length < 0) return Status::from_errno(errno, "cannot list the xattrs of '" + where + "'");
  names.resize(static_cast<size_t>(length));
  for (size_t at = 0; at < names.size(); at = names.find('\0', at) + 1) {
    std::string name = names.c_str() + at;
    ssize_t size = ::fgetxattr(fd, name.c_str(), nullptr, 0);
    std::string value(size > 0 ? static_cast<size_t>(size) : 0, '\0');
    if (size > 0) size = ::fgetxattr(fd, name.c_str(), value.data(), value.size());
    if (size < 0) {
      if (errno == ENODATA) continue;  // removed meanwhile
      return Status::from_errno(errno, "cannot read the xattr " + name + " of '" + where + "'");
    }
    value.resize(static_cast<size_t>(size));
    if (harvest::layer_xattr_kept(name, value.data(), value.size())) {
      archive_entry_xattr_add_entry(entry, name.c_str(), value.data(), value.size());
    }
  }
  return Status::ok();
}

// Walks one upper layer into one archive.
class LayerWriter {
 public:
  LayerWriter(struct archive* a, const LayerArchiveRequest& request) : a_(a), request_(request) {}

  // Every entry below dir_fd, whose path in the layer is relative ("" for its root).
  Status walk(int dir_fd, const std::string& relative) {
    auto names = list_names(dir_fd, request_.upper + "/" + relative);
    if (!names) return names.status();
    for (const auto& name : *names) {
      std::string path = relative.empty() ? name : relative + "/" + name;
      if (excluded("/" + path)) continue;
      if (Status added = add(dir_fd, name, path); !added) return added;
    }
    return Status::ok();
  }

  const LayerArchive& result() const { return result_; }

 private:
  bool excluded(const std::string& sandbox_path) const {
    for (const auto& path : request_.excluded) {
      if (sandbox_path == path || sandbox_path.rfind(path + "/", 0) == 0) return true;
    }
    return false;
  }

  std::uint32_t sandbox_id(std::uint32_t host_id, std::uint32_t base) const {
    if (host_id < base || host_id - base >= request_.count) return kNobody;
    return host_id - base;
  }

  Entry header(const std::string& path, const struct stat& st) const {
    Entry entry(archive_entry_new());
    archive_entry_set_pathname(entry.get(), path.c_str());
    archive_entry_set_mode(entry.get(), st.st_mode);
    archive_entry_set_uid(entry.get(), sandbox_id(st.st_uid, request_.uid_base));
    archive_entry_set_gid(entry.get(), sandbox_id(st.st_gid, request_.gid_base));
    archive_entry_set_mtime(entry.get(), st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
    archive_entry_set_size(entry.get(), 0);
    return entry;
  }

  Status write_header(archive_entry* entry, const std::string& path) {
    if (archive_write_header(a_, entry) != ARCHIVE_OK) {
      return Status(ErrorCode::internal, "cannot archive '" + path + "': " + archive_error_string(a_));
    }
    ++result_.entries;
    return Status::ok();
  }

  Status add(int dir_fd, const std::string& name, const std::string& path) {
    struct stat st {};
    if (::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      return errno == ENOENT ? Status::ok() : Status::from_errno(errno, "cannot stat '" + path + "'");
    }
    if (S_ISDIR(st.st_mode)) return add_dir(dir_fd, name, path);
    if (S_ISREG(st.st_mode)) return add_file(dir_fd, name, path);
    if (S_ISLNK(st.st_mode)) return add_symlink(dir_fd, name, path, st);
    if (S_ISCHR(st.st_mode) && st.st_rdev == 0) {  // a whiteout: only its name and type matter
      Entry entry = header(path, st);
      archive_entry_set_uid(entry.get(), 0);
      archive_entry_set_gid(entry.get(), 0);
      return write_header(entry.get(), path);
    }
    ++result_.skipped;
    return Status::ok();
  }

  Status add_dir(int dir_fd, const std::string& name, const std::string& path) {
    Fd dir(::openat(dir_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    struct stat st {};
    if (!dir.valid() || ::fstat(dir.get(), &st) != 0) {
      return errno == ENOENT ? Status::ok() : Status::from_errno(errno, "cannot open '" + path + "'");
    }
    Entry entry = header(path, st);
    if (Status kept = add_xattrs(dir.get(), entry.get(), path); !kept) return kept;
    if (Status written = write_header(entry.get(), path); !written) return written;
    return walk(dir.get(), path);
  }

  Status add_file(int dir_fd, const std::string& name, const std::string& path) {
    Fd file(::openat(dir_fd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NOATIME | O_CLOEXEC));
    struct stat st {};
    if (!file.valid() || ::fstat(file.get(), &st) != 0) {
      return errno == ENOENT ? Status::ok() : Status::from_errno(errno, "cannot open '" + path + "'");
    }
    if (!S_ISREG(st.st_mode)) return Status::ok();  // replaced meanwhile
    Entry entry = header(path, st);
    if (st.st_nlink > 1) {
      auto [first, fresh] = links_.emplace(std::make_pair(st.st_dev, st.st_ino), path);
      if (!fresh) {
        archive_entry_set_hardlink(entry.get(), first->second.c_str());
        return write_header(entry.get(), path);
      }
    }
    archive_entry_set_size(entry.get(), st.st_size);
    if (Status kept = add_xattrs(file.get(), entry.get(), path); !kept) return kept;
    if (Status written = write_header(entry.get(), path); !written) return written;
    return copy_data(file.get(), static_cast<std::uint64_t>(st.st_size), path);
  }

  // Up to size bytes (a file that shrank meanwhile is padded by the writer).
  Status copy_data(int fd, std::uint64_t size, const std::string& path) {
    char buffer[1 << 16];
    while (size > 0) {
      ssize_t n = ::read(fd, buffer, std::min<std::uint64_t>(size, sizeof buffer));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return Status::from_errno(errno, "cannot read '" + path + "'");
      if (n == 0) break;
      if (archive_write_data(a_, buffer, static_cast<size_t>(n)) < 0) {
        return Status(ErrorCode::internal, "cannot archive '" + path + "': " + archive_error_string(a_));
      }
      size -= static_cast<std::uint64_t>(n);
    }
    return Status::ok();
  }

  Status add_symlink(int dir_fd, const std::string& name, const std::string& path, const struct stat& st) {
    std::string target(4096, '\0');
    ssize_t n = ::readlinkat(dir_fd, name.c_str(), target.data(), target.size());
    if (n < 0) return errno == ENOENT ? Status::ok() : Status::from_errno(errno, "cannot read the link '" + path + "'");
    target.resize(static_cast<size_t>(n));
    Entry entry = header(path, st);
    archive_entry_set_symlink(entry.get(), target.c_str());
    return write_header(entry.get(), path);
  }

  struct archive* a_;
  const LayerArchiveRequest& request_;
  LayerArchive result_;
  std::map<std::pair<dev_t, ino_t>, std::string> links_;  // the first path of each multiply-linked file
};

}  // namespace

Result<std::string> file_sha256(const std::string& path, std::uint64_t* size) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return Status::from_errno(errno, "cannot read '" + path + "'");
  Sha256 hash;
  char buffer[1 << 16];
  ssize_t n;
  *size = 0;
  while ((n = ::read(fd.get(), buffer, sizeof buffer)) > 0) {
    hash.update(buffer, static_cast<size_t>(n));
    *size += static_cast<std::uint64_t>(n);
  }
  if (n < 0) return Status::from_errno(errno, "cannot read '" + path + "'");
  return hash.hex_digest();
}

namespace {

// The walk into an open archive at temp; the writer is closed either way.
Result<LayerArchive> write_archive(const LayerArchiveRequest& request, const std::string& temp) {
  std::unique_ptr<struct archive, WriterFree> a(archive_write_new());
  if (!a) return Status(ErrorCode::resource_exhausted, "out of memory for the archive writer");
  archive_write_set_format_pax_restricted(a.get());
  archive_write_add_filter_zstd(a.get());
  if (archive_write_open_filename(a.get(), temp.c_str()) != ARCHIVE_OK) {
    return Status(ErrorCode::internal, "cannot write '" + temp + "': " + archive_error_string(a.get()));
  }
  Fd upper(::open(request.upper.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!upper.valid()) return Status::from_errno(errno, "cannot open the upper layer '" + request.upper + "'");
  LayerWriter writer(a.get(), request);
  Status walked = writer.walk(upper.get(), "");
  if (archive_write_close(a.get()) != ARCHIVE_OK && walked) {
    walked = Status(ErrorCode::resource_exhausted, "cannot write '" + temp + "': " + archive_error_string(a.get()));
  }
  if (!walked) return walked;
  return writer.result();
}

}  // namespace

Result<LayerArchive> archive_layer(const LayerArchiveRequest& request) {
  std::string temp = request.archive_path + ".tmp";
  auto written = write_archive(request, temp);
  if (written && ::chmod(temp.c_str(), 0600) != 0) written = Status::from_errno(errno, "cannot write '" + temp + "'");
  if (written && ::rename(temp.c_str(), request.archive_path.c_str()) != 0) {
    written = Status::from_errno(errno, "cannot write '" + request.archive_path + "'");
  }
  if (!written) {
    ::unlink(temp.c_str());
    return written.status();
  }
  auto sha256 = file_sha256(request.archive_path, &written->size);
  if (!sha256) return sha256.status();
  written->sha256 = *sha256;
  return written;
}

}  // namespace gpubox::host
