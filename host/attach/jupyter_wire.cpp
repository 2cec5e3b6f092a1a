#include "host/attach/jupyter_wire.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#include <memory>
#include <nlohmann/json.hpp>

namespace gpubox::host {

Result<std::size_t> locate_delimiter(const std::vector<zmq::message_t>& frames) {
  for (std::size_t i = 0; i < frames.size(); ++i) {
    if (frames[i].to_string_view() != kJupyterDelimiter) continue;
    if (frames.size() - i - 1 < kJupyterParts) {
      return Status(ErrorCode::invalid_request, "a Jupyter message needs a signature and four parts after its delimiter, got " +
                                                    std::to_string(frames.size() - i - 1) + " frames");
    }
    return i;
  }
  return Status(ErrorCode::invalid_request, "not a Jupyter message: no <IDS|MSG> delimiter among its " +
                                                std::to_string(frames.size()) + " frames");
}

std::string header_msg_type(std::string_view header) {
  nlohmann::json parsed = nlohmann::json::parse(header, nullptr, false);
  if (!parsed.is_object()) return "";
  auto type = parsed.find("msg_type");
  if (type == parsed.end() || !type->is_string()) return "";
  return type->get<std::string>();
}

std::string HmacSigner::sign(const zmq::message_t* parts) const {
  if (!enabled()) return "";
  struct MacFree {
    void operator()(EVP_MAC* mac) const { EVP_MAC_free(mac); }
    void operator()(EVP_MAC_CTX* ctx) const { EVP_MAC_CTX_free(ctx); }
  };
  std::unique_ptr<EVP_MAC, MacFree> mac(EVP_MAC_fetch(nullptr, "HMAC", nullptr));
  if (!mac) return "";
  std::unique_ptr<EVP_MAC_CTX, MacFree> ctx(EVP_MAC_CTX_new(mac.get()));
  char digest_name[] = "SHA256";
  OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest_name, 0), OSSL_PARAM_construct_end()};
  if (!ctx || EVP_MAC_init(ctx.get(), reinterpret_cast<const unsigned char*>(key_.data()), key_.size(), params) != 1) {
    return "";
  }
  for (int i = 0; i < 4; ++i) {
    EVP_MAC_update(ctx.get(), static_cast<const unsigned char*>(parts[i].data()), parts[i].size());
  }
  unsigned char digest[EVP_MAX_MD_SIZE];
  std::size_t length = 0;
  if (EVP_MAC_final(ctx.get(), digest, &length, sizeof digest) != 1) return "";
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(2 * length);
  for (std::size_t i = 0; i < length; ++i) {
    hex.push_back(kHex[digest[i] >> 4]);
    hex.push_back(kHex[digest[i] & 15]);
  }
  return hex;
}

bool HmacSigner::verify(std::string_view signature, const zmq::message_t* parts) const {
  if (!enabled()) return true;
  std::string expected = sign(parts);
  return !expected.empty() && signature.size() == expected.size() &&
         CRYPTO_memcmp(signature.data(), expected.data(), expected.size()) == 0;
}

}  // namespace gpubox::host
