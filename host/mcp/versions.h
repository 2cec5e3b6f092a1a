// The MCP protocol revisions gpubox speaks: the initialize handshake of
// 2025-11-25 (and the handshake revisions before it) and the stateless
// 2026-07-28 revision, whose requests carry their version in _meta.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace gpubox::mcp {

inline constexpr char kLatestHandshakeVersion[] = "2025-11-25";
inline constexpr char kLatestModernVersion[] = "2026-07-28";
inline constexpr char kProtocolVersionMetaKey[] = "io.modelcontextprotocol/protocolVersion";

// Oldest first.
const std::vector<std::string>& handshake_versions();
const std::vector<std::string>& modern_versions();
// Every version, oldest first (server/discover's supportedVersions).
std::vector<std::string> supported_versions();

// initialize's answer to the version a client asked for: that one when
// gpubox speaks it by handshake, else the latest handshake version.
std::string negotiate_handshake(const std::string& requested);
bool is_modern(const std::string& version);
bool is_supported(const std::string& version);

// params._meta["io.modelcontextprotocol/protocolVersion"], when it is a string.
std::optional<std::string> request_version(const nlohmann::json& params);

}  // namespace gpubox::mcp
