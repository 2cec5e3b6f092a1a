// Sha256: SHA-256 over bytes fed in pieces, through OpenSSL (SHA-NI / AVX2
// code paths: several GB/s where libsodium's portable code does ~200 MB/s).
// One object per thread; any thread.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

namespace gpubox {

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  void update(const void* data, std::size_t size);
  // Lower-case hex of the digest; call once.
  std::string hex_digest();

 private:
  struct Context;
  std::unique_ptr<Context> context_;
};

// True when text is 64 hex digits; lower-cases it in place.
bool normalize_sha256_hex(std::string& text);

}  // namespace gpubox
