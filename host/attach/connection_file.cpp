#include "host/attach/connection_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <sstream>

namespace gpubox::host {
namespace {

using nlohmann::json;

Status bad_connection_file(const std::string& what) { return Status(ErrorCode::invalid_request, "connection file: " + what); }

bool is_loopback(const std::string& ip) { return ip == "localhost" || ip.rfind("127.", 0) == 0 || ip == "::1"; }

}  // namespace

Result<ConnectionInfo> parse_connection_file(std::string_view text) {
  json file = json::parse(text, nullptr, false);
  if (file.is_discarded() || !file.is_object()) return bad_connection_file("expected a JSON object");
  ConnectionInfo info;
  auto string_field = [&](const char* name, std::string& out) -> Status {
    auto found = file.find(name);
    if (found == file.end() || found->is_null()) return Status::ok();
    if (!found->is_string()) return bad_connection_file(std::string(name) + ": expected a string");
    out = found->get<std::string>();
    return Status::ok();
  };
  std::string transport = "tcp";
  for (auto [name, out] : {std::pair<const char*, std::string*>{"transport", &transport}, {"ip", &info.ip},
                           {"key", &info.key}, {"signature_scheme", &info.signature_scheme},
                           {"kernel_name", &info.kernel_name}}) {
    if (Status status = string_field(name, *out); !status) return status;
  }
  if (transport != "tcp") return bad_connection_file("transport: only \"tcp\" is served, got \"" + transport + "\"");
  if (!is_loopback(info.ip)) return bad_connection_file("ip: attach serves this machine only; expected a loopback address such as 127.0.0.1, got \"" + info.ip + "\"");
  if (!info.key.empty() && info.signature_scheme != "hmac-sha256") {
    return bad_connection_file("signature_scheme: only hmac-sha256 is supported, got \"" + info.signature_scheme + "\"");
  }
  for (auto [name, out] : {std::pair<const char*, int*>{"shell_port", &info.shell_port}, {"iopub_port", &info.iopub_port},
                           {"stdin_port", &info.stdin_port}, {"control_port", &info.control_port},
                           {"hb_port", &info.hb_port}}) {
    auto found = file.find(name);
    if (found == file.end() || !found->is_number_integer() || found->get<long long>() < 1 || found->get<long long>() > 65535) {
      return bad_connection_file(std::string(name) + ": expected a port from 1 to 65535");
    }
    *out = found->get<int>();
  }
  return info;
}

Result<ConnectionInfo> read_connection_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::from_errno(errno, "cannot read connection file '" + path + "'");
  std::string text;
  char buffer[4096];
  while (true) {
    ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      return Status::from_errno(err, "cannot read connection file '" + path + "'");
    }
    if (n == 0) break;
    text.append(buffer, static_cast<std::size_t>(n));
    if (text.size() > (1 << 20)) {
      ::close(fd);
      return Status(ErrorCode::invalid_request, "connection file '" + path + "': larger than 1 MiB, not a connection file");
    }
  }
  ::close(fd);
  auto info = parse_connection_file(text);
  if (!info) return Status(ErrorCode::invalid_request, "'" + path + "': " + info.status().message());
  return info;
}

json connection_json(const ConnectionInfo& info) {
  return {{"transport", "tcp"},
          {"ip", info.ip},
          {"shell_port", info.shell_port},
          {"iopub_port", info.iopub_port},
          {"stdin_port", info.stdin_port},
          {"control_port", info.control_port},
          {"hb_port", info.hb_port},
          {"key", info.key},
          {"signature_scheme", info.signature_scheme},
          {"kernel_name", info.kernel_name}};
}

Status write_connection_file(const std::string& path, const ConnectionInfo& info) {
  std::string tmp = path + ".tmp-" + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return Status::from_errno(errno, "cannot write connection file '" + path + "'");
  std::string text = connection_json(info).dump(2) + "\n";
  ssize_t n = ::write(fd, text.data(), text.size());
  int err = errno;
  ::fchmod(fd, 0600);
  ::close(fd);
  if (n != static_cast<ssize_t>(text.size())) {
    ::unlink(tmp.c_str());
    return Status::from_errno(err, "cannot write connection file '" + path + "'");
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    err = errno;
    ::unlink(tmp.c_str());
    return Status::from_errno(err, "cannot write connection file '" + path + "'");
  }
  return Status::ok();
}

Result<std::string> random_hex_key() {
  unsigned char bytes[32];
  int fd = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::from_errno(errno, "open /dev/urandom");
  ssize_t n = ::read(fd, bytes, sizeof bytes);
  ::close(fd);
  if (n != static_cast<ssize_t>(sizeof bytes)) return Status(ErrorCode::internal, "short read from /dev/urandom");
  static constexpr char kHex[] = "0123456789abcdef";
  std::string key;
  for (unsigned char b : bytes) key += {kHex[b >> 4], kHex[b & 15]};
  return key;
}

}  // namespace gpubox::host
