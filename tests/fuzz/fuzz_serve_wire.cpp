// Fuzzes what the agent reads from a serve worker's channel, which user code
// can write to (agent/serve/worker_wire.h), two ways that must agree: the
// RPC I/O thread's parse_whole_message on the bytes as peeked, and the
// supervision thread's read_message over a real socketpair. Whatever the
// first accepts, the second reads as the same message from the same number
// of bytes; neither crashes, over-reads or allocates past the limits.
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "agent/serve/worker_wire.h"

using gpubox::serve::parse_whole_message;
using gpubox::serve::read_message;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > 65536) return -1;  // within one socket buffer, so the write below never blocks
  std::string_view bytes(reinterpret_cast<const char*>(data), size);  // NOLINT: bytes as chars
  auto whole = parse_whole_message(bytes);
  if (whole && (whole->second == 0 || whole->second > size)) std::abort();

  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) std::abort();
  int buffer = 1 << 18;
  ::setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &buffer, sizeof buffer);
  if (size > 0 && ::send(sv[0], data, size, MSG_DONTWAIT) != static_cast<ssize_t>(size)) std::abort();
  ::shutdown(sv[0], SHUT_WR);  // the end of the bytes is the worker's end
  auto read = read_message(sv[1], -1);
  if (whole) {
    if (!read || !read->has_value()) std::abort();
    const auto& message = **read;
    // Compared as encoded: a NaN in a body is not equal to itself as JSON.
    if (nlohmann::json::to_msgpack(message.body) != nlohmann::json::to_msgpack(whole->first.body) ||
        message.attachments.size() != whole->first.attachments.size()) {
      std::abort();
    }
    for (std::size_t i = 0; i < message.attachments.size(); ++i) {
      if (message.attachments[i].to_string_view() != whole->first.attachments[i].to_string_view()) std::abort();
    }
    char next;  // read_message took exactly the message's bytes: what follows is still there
    ssize_t left = ::recv(sv[1], &next, 1, MSG_DONTWAIT);
    if ((whole->second < size) != (left == 1)) std::abort();
  }
  ::close(sv[0]);
  ::close(sv[1]);
  return 0;
}
