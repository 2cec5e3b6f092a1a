// The checks the server makes of one client message before it acts on it,
// as pure functions over the frames' bytes (so that they can be fuzzed and
// unit-tested without sockets). Any thread.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>
#include <string_view>

#include "rpc/protocol.h"
#include "base/status.h"

namespace gpubox::rpc {

// A client message that passed every stateless check.
struct ParsedRequest {
  Header header;
  nlohmann::json body;  // the decoded map
};

// The request id of a header that decode_header refused, when one can still
// be read (a msgpack array whose element 1 is an integer ≥ 1), so
// that the refusal can be answered; 0 when none can.
std::uint64_t peek_request_id(std::string_view header_bytes);

// Validates one message from a client: frames are header, body, attachments
// (the routing id already removed). Checks the header (decode_header), that a
// body frame follows, that the kind is one a client sends, at most
// max_attachments attachments, a CALL's method within max_method_bytes, and
// the body (decode_body with max_body_bytes). The error is the one to answer
// with for peek_request_id(frames[0]) (nothing is answered when that is 0).
// What is left to the server is state: duplicate ids, max_in_flight, method lookup.
Result<ParsedRequest> parse_request(std::span<const std::string_view> frames, const Limits& limits);

}  // namespace gpubox::rpc
