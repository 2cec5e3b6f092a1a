#include "host/backends/local/user_namespace.h"

#include <fcntl.h>
#include <grp.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <sstream>

namespace gpubox::host {
namespace {

// root's first range in a subordinate id file ("root:100000:65536"), if any.
bool read_range(const std::string& path, std::uint32_t* first, std::uint32_t* count) {
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    std::string user, start, size;
    if (!std::getline(fields, user, ':') || !std::getline(fields, start, ':') || !std::getline(fields, size)) continue;
    if (user != "root" && user != "0") continue;
    try {
      unsigned long s = std::stoul(start), n = std::stoul(size);
      if (s == 0 || n == 0 || s > 0xfffffffful || n > 0xfffffffful - s) continue;
      *first = static_cast<std::uint32_t>(s);
      *count = static_cast<std::uint32_t>(n);
      return true;
    } catch (const std::exception&) {
    }
  }
  return false;
}

bool write_file(const std::string& path, const std::string& text) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  int saved = errno;
  ::close(fd);
  errno = saved;
  return ok;
}

}  // namespace

std::string IdRange::uid_map() const { return "0 " + std::to_string(host_uid) + " " + std::to_string(count) + "\n"; }
std::string IdRange::gid_map() const { return "0 " + std::to_string(host_gid) + " " + std::to_string(count) + "\n"; }

IdRange subordinate_range(const std::string& subuid, const std::string& subgid) {
  IdRange range;
  std::uint32_t uid = 0, uid_count = 0, gid = 0, gid_count = 0;
  if (read_range(subuid, &uid, &uid_count) && read_range(subgid, &gid, &gid_count)) {
    range.host_uid = uid;
    range.host_gid = gid;
    range.count = std::min(uid_count, gid_count);
  }
  return range;
}

Result<Fd> make_user_namespace(const IdRange& range) {
  int ready[2], done[2];
  if (::pipe2(ready, O_CLOEXEC) != 0) return Status::from_errno(errno, "pipe2");
  Fd ready_read(ready[0]), ready_write(ready[1]);
  if (::pipe2(done, O_CLOEXEC) != 0) return Status::from_errno(errno, "pipe2");
  Fd done_read(done[0]), done_write(done[1]);
  pid_t helper = ::fork();
  if (helper < 0) return Status::from_errno(errno, "fork");
  if (helper == 0) {
    // Unshare, say so, and wait until the namespace is held by the parent
    // (end of file on done once the parent closes its end).
    ::close(done_write.get());
    ::close(ready_read.get());
    char byte = ::unshare(CLONE_NEWUSER) == 0 ? 'u' : 'e';
    [[maybe_unused]] auto n = ::write(ready_write.get(), &byte, 1);
    [[maybe_unused]] auto m = ::read(done_read.get(), &byte, 1);
    ::_exit(0);
  }
  ready_write.reset();
  done_read.reset();
  auto finish = [&] {
    done_write.reset();
    ::waitpid(helper, nullptr, 0);
  };
  char byte = 0;
  if (::read(ready_read.get(), &byte, 1) != 1 || byte != 'u') {
    finish();
    return Status(ErrorCode::internal, "cannot create a user namespace (is kernel.unprivileged_userns_clone off?)");
  }
  std::string proc = "/proc/" + std::to_string(helper);
  if (!write_file(proc + "/uid_map", range.uid_map()) || !write_file(proc + "/gid_map", range.gid_map())) {
    Status status = Status::from_errno(errno, "cannot write the user namespace's id maps");
    finish();
    return status;
  }
  Fd userns(::open((proc + "/ns/user").c_str(), O_RDONLY | O_CLOEXEC));
  Status status = userns.valid() ? Status::ok() : Status::from_errno(errno, "cannot open the user namespace");
  finish();
  if (!status) return status;
  return userns;
}

bool enter_user_namespace(int userns_fd) {
  if (::setns(userns_fd, CLONE_NEWUSER) != 0) return false;
  if (::setgroups(0, nullptr) != 0 || ::setresgid(0, 0, 0) != 0 || ::setresuid(0, 0, 0) != 0) return false;
  // A mount namespace the new root owns, so that the agent may still bind
  // what it places itself (hidden models); the mounts built before stay
  // locked as they are (read-only /sys stays read-only).
  return ::unshare(CLONE_NEWNS) == 0;
}

bool hand_over(const std::string& path, const IdRange& range) {
  return ::chown(path.c_str(), range.host_uid, range.host_gid) == 0;
}

}  // namespace gpubox::host
