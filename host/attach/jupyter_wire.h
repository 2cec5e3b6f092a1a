// Jupyter's wire format (messaging protocol 5.3, "The Wire Protocol") as the
// attach relay needs it: where a message's parts sit among its frames, and
// the HMAC-SHA256 signature over them. Pure functions; any thread.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>
#include <zmq.hpp>

#include "base/status.h"

namespace gpubox::host {

inline constexpr std::string_view kJupyterDelimiter = "<IDS|MSG>";
// After the delimiter: signature, header, parent_header, metadata, content; buffers may follow.
inline constexpr std::size_t kJupyterParts = 5;

// The index of the delimiter: the frames before it are routing ids (ROUTER)
// or a topic (PUB), the signature follows it, then the four JSON parts.
// invalid_request when there is no delimiter or fewer than five frames after it.
Result<std::size_t> locate_delimiter(const std::vector<zmq::message_t>& frames);

// The msg_type of a header part; empty when it is not a JSON object with a non-empty msg_type string.
std::string header_msg_type(std::string_view header);

// Signs and checks messages with one connection's key. An empty key means
// Jupyter's "no authentication": signatures are empty and never checked.
class HmacSigner {
 public:
  explicit HmacSigner(std::string key) : key_(std::move(key)) {}
  bool enabled() const { return !key_.empty(); }
  // Lower-case hex HMAC-SHA256 over parts[0..3] (header, parent_header, metadata, content).
  std::string sign(const zmq::message_t* parts) const;
  // Constant-time comparison with sign(parts); true when the key is empty.
  bool verify(std::string_view signature, const zmq::message_t* parts) const;

 private:
  std::string key_;
};

}  // namespace gpubox::host
