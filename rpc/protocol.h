// Wire format of the gpubox RPC protocol (rpc/PROTOCOL.md): the header, the
// msgpack body and the limits. Pure functions over bytes; any thread.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "base/status.h"

namespace gpubox::rpc {

inline constexpr std::uint32_t kProtocolVersion = 1;

enum class Kind : std::uint8_t { call = 0, cancel = 1, credit = 2, data = 3, result = 4, error = 5 };
std::string_view kind_name(Kind kind);

struct Header {
  std::uint64_t id = 0;
  Kind kind = Kind::call;
  std::string method;           // CALL only
  std::uint64_t timeout_ms = 0;  // CALL only; 0 = the agent's default
  std::uint64_t credit = 0;      // CALL: initial window (0 = kDefaultWindow); CREDIT: increment
};

inline constexpr std::uint64_t kDefaultWindow = 16;

struct Limits {
  std::size_t max_message_bytes = 64u << 20;  // any frame
  std::size_t max_body_bytes = 1u << 20;      // frame 1
  std::size_t max_in_flight = 256;            // unfinished requests per connection
  std::size_t max_attachments = 64;           // frames after the body
  std::size_t max_method_bytes = 128;
};

// Encodes a header as the 6-element msgpack array.
std::string encode_header(const Header& header);
// Decodes and validates a header: array of 6, version 1, known kind, id ≥ 1,
// method only on CALL. The error names the element that is wrong.
Result<Header> decode_header(std::string_view bytes);

// The body must be a msgpack map; nesting deeper than 64 levels is refused.
Result<nlohmann::json> decode_body(std::string_view bytes, std::size_t max_bytes);
std::string encode_body(const nlohmann::json& body);

// The ERROR body for a status: {"code", "message"}.
nlohmann::json error_body(const Status& status);
// Reads an ERROR body back into a Status (internal when malformed).
Status status_from_error_body(const nlohmann::json& body);

}  // namespace gpubox::rpc
