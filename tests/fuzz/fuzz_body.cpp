// Fuzzes decode_body with the agent's default 1 MiB limit: any bytes fail
// with invalid_request (or resource_exhausted over the limit), or decode into
// a map that round-trips.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "rpc/protocol.h"
#include "tests/fuzz/body_invariants.h"

using namespace gpubox;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  constexpr std::size_t kLimit = rpc::Limits{}.max_body_bytes;
  if (size > kLimit + 1) return -1;
  std::string_view bytes(reinterpret_cast<const char*>(data), size);  // NOLINT: bytes as chars
  auto body = rpc::decode_body(bytes, kLimit);
  if (!body) {
    auto code = body.status().code();
    if (code == ErrorCode::resource_exhausted ? size <= kLimit : code != ErrorCode::invalid_request) std::abort();
    return 0;
  }
  fuzz::check_decoded_body(*body);
  return 0;
}
