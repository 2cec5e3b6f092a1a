#include "kernel/frame_channel.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace gpubox::kernel {

Status write_frame(int fd, std::string_view payload) {
  if (payload.size() > kMaxFrameBytes) return Status(ErrorCode::resource_exhausted, "executor frame too large");
  uint32_t n = static_cast<uint32_t>(payload.size());
  unsigned char header[4] = {static_cast<unsigned char>(n >> 24), static_cast<unsigned char>(n >> 16),
                             static_cast<unsigned char>(n >> 8), static_cast<unsigned char>(n)};
  // Header and payload in one call: the reader wakes once, for the whole frame.
  iovec parts[2] = {{header, 4}, {const_cast<char*>(payload.data()), payload.size()}};
  size_t left = 4 + payload.size();
  int first = 0;
  while (left > 0) {
    msghdr message{};
    message.msg_iov = parts + first;
    message.msg_iovlen = static_cast<size_t>(2 - first);
    // The channel is a socket: MSG_NOSIGNAL makes a dead executor an EPIPE, not a SIGPIPE.
    ssize_t written = ::sendmsg(fd, &message, MSG_NOSIGNAL);
    if (written < 0 && errno == ENOTSOCK) written = ::writev(fd, parts + first, 2 - first);
    if (written < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) {
        pollfd p{fd, POLLOUT, 0};
        ::poll(&p, 1, 1000);
        continue;
      }
      return Status::from_errno(errno, "write to the executor");
    }
    left -= static_cast<size_t>(written);
    auto done = static_cast<size_t>(written);
    while (first < 2 && done >= parts[first].iov_len) {
      done -= parts[first].iov_len;
      ++first;
    }
    if (first < 2) {
      parts[first].iov_base = static_cast<char*>(parts[first].iov_base) + done;
      parts[first].iov_len -= done;
    }
  }
  return Status::ok();
}

FrameReader::Fill FrameReader::fill(int fd) {
  char chunk[65536];
  while (true) {
    ssize_t n = ::read(fd, chunk, sizeof chunk);
    if (n > 0) {
      if (offset_ > 0 && offset_ == buffer_.size()) {
        buffer_.clear();
        offset_ = 0;
      }
      buffer_.append(chunk, static_cast<size_t>(n));
      continue;
    }
    if (n == 0) return Fill::eof;
    if (errno == EINTR) continue;
    if (errno == EAGAIN) return Fill::more;
    return Fill::error;
  }
}

bool FrameReader::next(std::string& payload) {
  size_t available = buffer_.size() - offset_;
  if (available < 4) return false;
  const auto* p = reinterpret_cast<const unsigned char*>(buffer_.data() + offset_);
  uint32_t n = (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
  if (n > kMaxFrameBytes) {
    oversized_ = true;
    return false;
  }
  if (available < 4 + size_t{n}) return false;
  payload.assign(buffer_, offset_ + 4, n);
  offset_ += 4 + size_t{n};
  if (offset_ == buffer_.size()) {
    buffer_.clear();
    offset_ = 0;
  }
  return true;
}

bool well_formed_frame(const nlohmann::json& frame, std::string* why) {
  using Type = nlohmann::json::value_t;
  if (!frame.is_object()) {
    *why = "a frame must be a JSON object";
    return false;
  }
  auto type = frame.find("type");
  if (type == frame.end() || !type->is_string()) {
    *why = "\"type\" must be a string";
    return false;
  }
  // Every field the agent reads from a frame, with the JSON type it must have.
  enum class Kind { string, boolean, object, array, string_array };
  static const std::pair<const char*, Kind> kFields[] = {
      {"status", Kind::string},     {"ename", Kind::string},        {"evalue", Kind::string},
      {"prompt", Kind::string},     {"implementation", Kind::string}, {"python_version", Kind::string},
      {"password", Kind::boolean},  {"update", Kind::boolean},      {"wait", Kind::boolean},
      {"died", Kind::boolean},      {"timed_out", Kind::boolean},   {"ack", Kind::boolean},
      {"data", Kind::object},
      {"metadata", Kind::object},   {"transient", Kind::object},    {"payload", Kind::array},
      {"traceback", Kind::string_array}};
  for (const auto& [name, kind] : kFields) {
    auto field = frame.find(name);
    if (field == frame.end()) continue;
    bool ok = false;
    switch (kind) {
      case Kind::string: ok = field->type() == Type::string; break;
      case Kind::boolean: ok = field->type() == Type::boolean; break;
      case Kind::object: ok = field->type() == Type::object; break;
      case Kind::array: ok = field->is_array(); break;
      case Kind::string_array:
        ok = field->is_array() && std::all_of(field->begin(), field->end(), [](const auto& line) { return line.is_string(); });
        break;
    }
    if (!ok) {
      static const char* kNames[] = {"a string", "a boolean", "an object", "an array", "an array of strings"};
      *why = std::string("\"") + name + "\" must be " + kNames[static_cast<int>(kind)];
      return false;
    }
  }
  return true;
}

}  // namespace gpubox::kernel
