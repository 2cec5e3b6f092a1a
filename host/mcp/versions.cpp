#include "host/mcp/versions.h"

#include <algorithm>

namespace gpubox::mcp {

const std::vector<std::string>& handshake_versions() {
  static const std::vector<std::string> kVersions = {"2024-11-05", "2025-03-26", "2025-06-18", kLatestHandshakeVersion};
  return kVersions;
}

const std::vector<std::string>& modern_versions() {
  static const std::vector<std::string> kVersions = {kLatestModernVersion};
  return kVersions;
}

std::vector<std::string> supported_versions() {
  std::vector<std::string> all = handshake_versions();
  all.insert(all.end(), modern_versions().begin(), modern_versions().end());
  return all;
}

std::string negotiate_handshake(const std::string& requested) {
  const auto& known = handshake_versions();
  return std::find(known.begin(), known.end(), requested) != known.end() ? requested : kLatestHandshakeVersion;
}

bool is_modern(const std::string& version) {
  const auto& modern = modern_versions();
  return std::find(modern.begin(), modern.end(), version) != modern.end();
}

bool is_supported(const std::string& version) {
  const auto& known = handshake_versions();
  return is_modern(version) || std::find(known.begin(), known.end(), version) != known.end();
}

std::optional<std::string> request_version(const nlohmann::json& params) {
  if (!params.is_object()) return std::nullopt;
  auto meta = params.find("_meta");
  if (meta == params.end() || !meta->is_object()) return std::nullopt;
  auto version = meta->find(kProtocolVersionMetaKey);
  if (version == meta->end() || !version->is_string()) return std::nullopt;
  return version->get<std::string>();
}

}  // namespace gpubox::mcp
