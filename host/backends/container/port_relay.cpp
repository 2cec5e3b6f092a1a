#include "host/backends/container/port_relay.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <memory>
#include <thread>

#include "base/fd.h"

namespace gpubox::host {
namespace {

// Both sockets of one relayed connection; closed when both directions ended.
struct Connection {
  Fd outside;  // accepted on the host
  Fd inside;   // connected in the container
  std::atomic<int> directions{2};
};

void no_delay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

// Copies from one socket to the other until end of file or an error, then
// half-closes the other side so the peer sees the end too.
void pump(const std::shared_ptr<Connection>& connection, bool outward) {
  int from = outward ? connection->inside.get() : connection->outside.get();
  int to = outward ? connection->outside.get() : connection->inside.get();
  char buffer[256 * 1024];
  while (true) {
    ssize_t got = ::read(from, buffer, sizeof buffer);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    if (write_fully(to, buffer, static_cast<size_t>(got)) != 0) break;
  }
  ::shutdown(to, SHUT_WR);
  ::shutdown(from, SHUT_RD);
  if (--connection->directions == 0) {
    connection->outside.reset();
    connection->inside.reset();
  }
}

[[noreturn]] void relay_main(int listener, int pidfd, std::uint16_t target_port) {
  sockaddr_in target{};
  target.sin_family = AF_INET;
  target.sin_port = htons(target_port);
  target.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  pollfd fds[2] = {{listener, POLLIN, 0}, {pidfd, POLLIN, 0}};
  while (true) {
    int n = ::poll(fds, 2, -1);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 || fds[1].revents) ::_exit(0);  // the container's PID 1 exited
    if (!fds[0].revents) continue;
    int accepted = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    if (accepted < 0) continue;
    auto connection = std::make_shared<Connection>();
    connection->outside.reset(accepted);
    // Created after setns: this socket lives in the container's namespace.
    connection->inside.reset(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!connection->inside.valid() ||
        ::connect(connection->inside.get(), reinterpret_cast<sockaddr*>(&target), sizeof target) != 0) {
      continue;  // nothing listens yet (the agent is starting): the client retries
    }
    no_delay(connection->outside.get());
    no_delay(connection->inside.get());
    std::thread([connection] { pump(connection, false); }).detach();
    std::thread([connection] { pump(connection, true); }).detach();
  }
}

}  // namespace

Result<RelayStarted> start_port_relay(pid_t container_pid, const std::string& host_ip, std::uint16_t host_port,
                                      std::uint16_t target_port) {
  Fd netns(::open(("/proc/" + std::to_string(container_pid) + "/ns/net").c_str(), O_RDONLY | O_CLOEXEC));
  if (!netns.valid()) return Status::from_errno(errno, "cannot open the container's network namespace");
  Fd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, container_pid, 0)));
  if (!pidfd.valid()) return Status::from_errno(errno, "pidfd_open of the container's PID 1");

  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(host_port);
  if (::inet_pton(AF_INET, host_ip.c_str(), &address.sin_addr) != 1) {
    return Status(ErrorCode::invalid_request, "--publish: '" + host_ip + "' is not an IPv4 address");
  }
  Fd listener(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  int one = 1;
  ::setsockopt(listener.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (!listener.valid() || ::bind(listener.get(), reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
      ::listen(listener.get(), 64) != 0) {
    return Status(ErrorCode::invalid_request, "--publish " + host_ip + ":" + std::to_string(host_port) +
                                                  ": cannot listen there: " + std::strerror(errno));
  }
  socklen_t length = sizeof address;
  ::getsockname(listener.get(), reinterpret_cast<sockaddr*>(&address), &length);

  int ready_pipe[2];
  if (::pipe2(ready_pipe, O_CLOEXEC) != 0) return Status::from_errno(errno, "pipe2");
  Fd ready_read(ready_pipe[0]), ready_write(ready_pipe[1]);
  pid_t pid = ::fork();
  if (pid < 0) return Status::from_errno(errno, "fork");
  if (pid == 0) {
    ::setsid();
    sigset_t empty;
    sigemptyset(&empty);
    ::sigprocmask(SIG_SETMASK, &empty, nullptr);
    int null_fd = ::open("/dev/null", O_RDWR);
    for (int fd = 0; fd < 3; ++fd) ::dup2(null_fd, fd);
    char status = ::setns(netns.get(), CLONE_NEWNET) == 0 ? 'k' : 'e';
    (void)!::write(ready_write.get(), &status, 1);
    if (status != 'k') ::_exit(1);
    // Only the listener and the pidfd stay open (as 3 and 4): nothing the CLI
    // held (its output pipes, say) is kept open for the relay's lifetime.
    int listening = ::fcntl(listener.get(), F_DUPFD, 10), exited = ::fcntl(pidfd.get(), F_DUPFD, 10);
    if (listening < 0 || exited < 0 || ::dup2(listening, 3) != 3 || ::dup2(exited, 4) != 4) ::_exit(1);
    ::syscall(SYS_close_range, 5, ~0U, 0);
    relay_main(3, 4, target_port);
  }
  ready_write.reset();
  char status = 0;
  ssize_t got;
  do {
    got = ::read(ready_read.get(), &status, 1);
  } while (got < 0 && errno == EINTR);
  if (got != 1 || status != 'k') {
    ::kill(pid, SIGKILL);
    return Status(ErrorCode::permission_denied, "cannot enter the container's network namespace (run as root)");
  }
  auto start_time = process_start_time(pid);
  if (!start_time) return Status(ErrorCode::internal, "the port relay exited at its start");
  return RelayStarted{{pid, *start_time}, ntohs(address.sin_port)};
}

}  // namespace gpubox::host
