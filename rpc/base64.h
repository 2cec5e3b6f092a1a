// Base64 (RFC 4648, standard alphabet) decoding, shared by the agent (config
// given in an environment variable) and the host (image outputs of a cell).
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace gpubox {

// The bytes text encodes; line breaks are skipped, '=' padding may only end it.
// nullopt when text holds any other character or data after the padding.
std::optional<std::string> base64_decode(std::string_view text);

}  // namespace gpubox
