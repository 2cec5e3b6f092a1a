// Fuzzes decode_header: any bytes either fail cleanly or decode into a header
// that encodes and decodes back to itself.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "rpc/message.h"
#include "rpc/protocol.h"

using namespace gpubox::rpc;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > 4096) return -1;  // headers longer than 512 bytes are refused before parsing
  std::string_view bytes(reinterpret_cast<const char*>(data), size);  // NOLINT: bytes as chars
  auto header = decode_header(bytes);
  if (!header) {
    if (header.status().code() != gpubox::ErrorCode::invalid_request) std::abort();
    (void)peek_request_id(bytes);
    return 0;
  }
  if (header->id == 0 || static_cast<int>(header->kind) > 5) std::abort();
  if (kind_name(header->kind) == "?") std::abort();
  if (peek_request_id(bytes) != header->id) std::abort();
  std::string encoded = encode_header(*header);
  auto again = decode_header(encoded);
  if (!again) std::abort();
  if (again->id != header->id || again->kind != header->kind || again->method != header->method ||
      again->timeout_ms != header->timeout_ms || again->credit != header->credit) {
    std::abort();
  }
  if (encode_header(*again) != encoded) std::abort();
  return 0;
}
