// Checks shared by the targets that decode bodies.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "rpc/protocol.h"

namespace gpubox::fuzz {

// A decoded body is a map that re-encodes to bytes which decode to the same
// encoding (compared as bytes: NaN is not equal to itself).
inline void check_decoded_body(const nlohmann::json& body) {
  if (!body.is_object()) std::abort();
  std::string encoded = rpc::encode_body(body);
  auto again = rpc::decode_body(encoded, SIZE_MAX);
  if (!again) std::abort();
  if (rpc::encode_body(*again) != encoded) std::abort();
  // Every body may be read as an ERROR body; that never throws.
  (void)rpc::status_from_error_body(body);
}

}  // namespace gpubox::fuzz
