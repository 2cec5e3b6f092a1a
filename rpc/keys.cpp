#include "rpc/keys.h"

#include <zmq.h>

namespace gpubox::rpc {

Result<KeyPair> generate_keypair() {
  char public_key[41];
  char secret_key[41];
  if (zmq_curve_keypair(public_key, secret_key) != 0) {
    return Status(ErrorCode::internal, "zmq_curve_keypair failed: libzmq was built without CURVE");
  }
  return KeyPair{public_key, secret_key};
}

Result<std::string> public_key_of(const std::string& secret_key) {
  if (!is_z85_key(secret_key)) return Status(ErrorCode::invalid_request, "secret key: expected 40 Z85 characters");
  char public_key[41];
  if (zmq_curve_public(public_key, secret_key.c_str()) != 0) {
    return Status(ErrorCode::internal, "zmq_curve_public failed");
  }
  return std::string(public_key);
}

bool is_z85_key(const std::string& text) {
  if (text.size() != 40) return false;
  unsigned char bytes[32];
  return zmq_z85_decode(bytes, text.c_str()) != nullptr;
}

}  // namespace gpubox::rpc
