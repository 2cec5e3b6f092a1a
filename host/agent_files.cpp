#include "host/agent_files.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>

namespace gpubox::host {
namespace {

std::string kind_of(mode_t mode) {
  if (S_ISLNK(mode)) return "a symbolic link";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
  return "not a regular file";
}

Status refused(const std::string& path, const std::string& what) {
  return Status(ErrorCode::permission_denied,
                "'" + path + "' is " + what + ", not the agent's file: refused (sandbox code may have put it there)");
}

}  // namespace

Result<Fd> open_agent_file(const std::string& dir, const std::string& name) {
  const std::string path = dir + "/" + name;
  Fd dir_fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!dir_fd.valid()) {
    if (errno == ENOENT) return Status(ErrorCode::not_found, "no directory '" + dir + "'");
    if (errno == ELOOP || errno == ENOTDIR) return refused(dir, "a symbolic link or no directory");
    return Status::from_errno(errno, "cannot open '" + dir + "'");
  }
  Fd fd(::openat(dir_fd.get(), name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
  if (!fd.valid()) {
    int error = errno;
    struct stat st {};
    if (error == ENOENT) return Status(ErrorCode::not_found, "no file '" + path + "'");
    // O_NOFOLLOW on a link: ELOOP; a socket: ENXIO. Say what stands there.
    if (::fstatat(dir_fd.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISREG(st.st_mode)) {
      return refused(path, kind_of(st.st_mode));
    }
    return Status::from_errno(error, "cannot open '" + path + "'");
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return Status::from_errno(errno, "cannot stat '" + path + "'");
  if (!S_ISREG(st.st_mode)) return refused(path, kind_of(st.st_mode));
  return fd;
}

Result<std::string> read_bounded(int fd, std::size_t limit, bool* more) {
  std::string text;
  char buffer[65536];
  while (text.size() <= limit) {
    std::size_t want = std::min(sizeof buffer, limit + 1 - text.size());
    ssize_t got = ::read(fd, buffer, want);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return Status::from_errno(errno, "read");
    if (got == 0) break;
    text.append(buffer, static_cast<std::size_t>(got));
  }
  bool longer = text.size() > limit;
  if (longer) text.resize(limit);
  if (more) *more = longer;
  return text;
}

Result<std::string> read_agent_file(const std::string& dir, const std::string& name, std::size_t limit, bool* more) {
  auto fd = open_agent_file(dir, name);
  if (!fd) return fd.status();
  return read_bounded(fd->get(), limit, more);
}

}  // namespace gpubox::host
