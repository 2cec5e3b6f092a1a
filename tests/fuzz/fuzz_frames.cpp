// Fuzzes the server's per-message validation (rpc/message.h) over a whole
// multipart message cut from the input (fuzz_input.h): header, body,
// attachments. Uses small limits so that each limit is reachable.
#include <cstdint>
#include <cstdlib>

#include "rpc/message.h"
#include "tests/fuzz/body_invariants.h"
#include "tests/fuzz/fuzz_input.h"

using namespace gpubox;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > 64 * 1024) return -1;
  rpc::Limits limits;
  limits.max_body_bytes = 4096;
  limits.max_attachments = 4;
  limits.max_method_bytes = 32;
  auto frames = fuzz::split_frames(data, size, 16);
  auto request = rpc::parse_request(frames, limits);
  std::uint64_t id = frames.empty() ? 0 : rpc::peek_request_id(frames[0]);
  if (!request) {
    auto code = request.status().code();
    if (code != ErrorCode::invalid_request && code != ErrorCode::resource_exhausted) std::abort();
    return 0;
  }
  // Accepted: everything the server relies on holds.
  const rpc::Header& header = request->header;
  if (frames.size() < 2 || frames.size() - 2 > limits.max_attachments) std::abort();
  if (frames[1].size() > limits.max_body_bytes) std::abort();
  if (header.kind == rpc::Kind::result || header.kind == rpc::Kind::error) std::abort();
  if ((header.kind == rpc::Kind::call) == header.method.empty()) std::abort();
  if (header.method.size() > limits.max_method_bytes) std::abort();
  if (id != header.id || id == 0) std::abort();
  fuzz::check_decoded_body(request->body);
  return 0;
}
