#include "agent/serve/worker_wire.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <climits>
#include <cstring>

#include "rpc/protocol.h"

namespace gpubox::serve {
namespace {

void put_le(std::string& out, std::uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

std::uint64_t get_le(std::string_view in, std::size_t at, int bytes) {
  std::uint64_t value = 0;
  for (int i = 0; i < bytes; ++i) value |= static_cast<std::uint64_t>(static_cast<std::uint8_t>(in[at + i])) << (8 * i);
  return value;
}

enum class Got { bytes, eof, aborted };

// Fills size bytes; eof/aborted only before the first byte arrived.
Result<Got> read_exact(int fd, int abort_fd, void* into, std::size_t size) {
  char* at = static_cast<char*>(into);
  std::size_t done = 0;
  while (done < size) {
    if (abort_fd >= 0) {
      pollfd fds[2] = {{fd, POLLIN, 0}, {abort_fd, POLLIN, 0}};
      int ready = ::poll(fds, 2, -1);
      if (ready < 0 && errno == EINTR) continue;
      if (ready < 0) return Status::from_errno(errno, "serve worker channel: poll");
      if ((fds[1].revents & POLLIN) && !(fds[0].revents & (POLLIN | POLLHUP))) {
        if (done == 0) return Got::aborted;
        return Status(ErrorCode::unavailable, "the serve worker ended in the middle of a message");
      }
    }
    ssize_t n = ::read(fd, at + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::from_errno(errno, "serve worker channel: read");
    if (n == 0) {
      if (done == 0) return Got::eof;
      return Status(ErrorCode::unavailable, "the serve worker ended in the middle of a message");
    }
    done += static_cast<std::size_t>(n);
  }
  return Got::bytes;
}

Status read_rest(int fd, int abort_fd, void* into, std::size_t size) {
  if (size == 0) return Status::ok();
  auto got = read_exact(fd, abort_fd, into, size);
  if (!got) return got.status();
  if (*got != Got::bytes) return Status(ErrorCode::unavailable, "the serve worker ended in the middle of a message");
  return Status::ok();
}

}  // namespace

std::string encode_prefix(std::size_t body_bytes, const std::vector<std::uint64_t>& lengths) {
  std::string out;
  out.reserve(kPrefixBytes + 8 * lengths.size());
  put_le(out, body_bytes, 4);
  put_le(out, lengths.size(), 4);
  for (std::uint64_t length : lengths) put_le(out, length, 8);
  return out;
}

Result<Prefix> parse_prefix(std::string_view bytes) {
  if (bytes.size() != kPrefixBytes) return Status(ErrorCode::invalid_request, "prefix: expected 8 bytes");
  Prefix prefix;
  prefix.body_bytes = static_cast<std::uint32_t>(get_le(bytes, 0, 4));
  prefix.attachments = static_cast<std::uint32_t>(get_le(bytes, 4, 4));
  if (prefix.body_bytes == 0 || prefix.body_bytes > kMaxBodyBytes) {
    return Status(ErrorCode::invalid_request, "body length " + std::to_string(prefix.body_bytes) + ": expected 1 to " +
                                                  std::to_string(kMaxBodyBytes));
  }
  if (prefix.attachments > kMaxAttachments) {
    return Status(ErrorCode::invalid_request, "attachment count " + std::to_string(prefix.attachments) +
                                                  ": at most " + std::to_string(kMaxAttachments));
  }
  return prefix;
}

Result<std::vector<std::uint64_t>> parse_lengths(std::string_view bytes, std::uint32_t count) {
  if (bytes.size() != 8ull * count) return Status(ErrorCode::invalid_request, "length table: wrong size");
  std::vector<std::uint64_t> lengths(count);
  for (std::uint32_t i = 0; i < count; ++i) {
    lengths[i] = get_le(bytes, 8ull * i, 8);
    if (lengths[i] > kMaxAttachmentBytes) {
      return Status(ErrorCode::invalid_request, "attachment " + std::to_string(i) + ": " + std::to_string(lengths[i]) +
                                                    " bytes, more than one frame's " + std::to_string(kMaxAttachmentBytes));
    }
  }
  return lengths;
}

Status write_message(int fd, const nlohmann::json& body, const std::vector<zmq::message_t>& attachments) {
  std::string packed;
  nlohmann::json::to_msgpack(body, packed);
  std::vector<std::uint64_t> lengths;
  for (const auto& attachment : attachments) lengths.push_back(attachment.size());
  std::string prefix = encode_prefix(packed.size(), lengths);
  std::vector<iovec> parts;
  parts.push_back({prefix.data(), prefix.size()});
  parts.push_back({packed.data(), packed.size()});
  for (const auto& attachment : attachments) {
    if (attachment.size()) parts.push_back({const_cast<void*>(attachment.data()), attachment.size()});
  }
  std::size_t first = 0;
  while (first < parts.size()) {
    msghdr message{};
    message.msg_iov = parts.data() + first;
    message.msg_iovlen = std::min<std::size_t>(parts.size() - first, IOV_MAX);
    // MSG_NOSIGNAL: a worker that died is an EPIPE here, never a SIGPIPE for the agent.
    ssize_t n = ::sendmsg(fd, &message, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::from_errno(errno, "serve worker channel: write");
    auto left = static_cast<std::size_t>(n);
    while (first < parts.size() && left >= parts[first].iov_len) left -= parts[first++].iov_len;
    if (first < parts.size()) {
      parts[first].iov_base = static_cast<char*>(parts[first].iov_base) + left;
      parts[first].iov_len -= left;
    }
  }
  return Status::ok();
}

Result<std::optional<WireMessage>> read_message(int fd, int abort_fd) {
  char head[kPrefixBytes];
  auto got = read_exact(fd, abort_fd, head, sizeof head);
  if (!got) return got.status();
  if (*got != Got::bytes) return std::optional<WireMessage>();
  auto prefix = parse_prefix(std::string_view(head, sizeof head));
  if (!prefix) return prefix.status();
  std::string table(8ull * prefix->attachments, '\0');
  if (Status read = read_rest(fd, abort_fd, table.data(), table.size()); !read) return read;
  auto lengths = parse_lengths(table, prefix->attachments);
  if (!lengths) return lengths.status();
  std::string packed(prefix->body_bytes, '\0');
  if (Status read = read_rest(fd, abort_fd, packed.data(), packed.size()); !read) return read;
  auto body = rpc::decode_body(packed, kMaxBodyBytes);
  if (!body) return body.status();
  WireMessage message;
  message.body = std::move(*body);
  for (std::uint64_t length : *lengths) {
    zmq::message_t frame(static_cast<std::size_t>(length));
    if (Status read = read_rest(fd, abort_fd, frame.data(), frame.size()); !read) return read;
    message.attachments.push_back(std::move(frame));
  }
  return std::optional<WireMessage>(std::move(message));
}

}  // namespace gpubox::serve
