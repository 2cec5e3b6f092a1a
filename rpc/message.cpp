#include "rpc/message.h"

namespace gpubox::rpc {

std::uint64_t peek_request_id(std::string_view header_bytes) {
  if (header_bytes.size() > 512) return 0;
  try {
    nlohmann::json array = nlohmann::json::from_msgpack(header_bytes.begin(), header_bytes.end());
    // Any msgpack integer format, as decode_header accepts: a positive signed one too.
    if (!array.is_array() || array.size() < 2 || !array[1].is_number_integer()) return 0;
    if (!array[1].is_number_unsigned() && array[1].get<std::int64_t>() < 1) return 0;
    return array[1].get<std::uint64_t>();
  } catch (const nlohmann::json::exception&) {
    return 0;
  }
}

Result<ParsedRequest> parse_request(std::span<const std::string_view> frames, const Limits& limits) {
  if (frames.empty()) return Status(ErrorCode::invalid_request, "message: no header frame");
  auto header = decode_header(frames[0]);
  if (!header) return header.status();
  if (frames.size() < 2) return Status(ErrorCode::invalid_request, "message: expected a header frame and a body frame");
  if (header->kind == Kind::result || header->kind == Kind::error) {
    return Status(ErrorCode::invalid_request, "header[2] kind: RESULT and ERROR are sent by the agent only");
  }
  if (frames.size() - 2 > limits.max_attachments) {
    return Status(ErrorCode::invalid_request, "message: more than " + std::to_string(limits.max_attachments) + " attachments");
  }
  if (header->method.size() > limits.max_method_bytes) {
    return Status(ErrorCode::invalid_request, "header[3] method: longer than " + std::to_string(limits.max_method_bytes) + " bytes");
  }
  auto body = decode_body(frames[1], limits.max_body_bytes);
  if (!body) return body.status();
  return ParsedRequest{std::move(*header), std::move(*body)};
}

}  // namespace gpubox::rpc
