// CURVE keys as 40-character Z85 text. Pure functions; any thread.
#pragma once

#include <string>

#include "base/status.h"

namespace gpubox::rpc {

struct KeyPair {
  std::string public_key;  // Z85, 40 characters
  std::string secret_key;  // Z85, 40 characters
};

// A fresh Curve25519 key pair.
Result<KeyPair> generate_keypair();
// The public key of a secret key.
Result<std::string> public_key_of(const std::string& secret_key);
// True for 40 characters of the Z85 alphabet that decode to 32 bytes.
bool is_z85_key(const std::string& text);

}  // namespace gpubox::rpc
