// Base64 (RFC 4648, standard alphabet), shared by the agent (config given in an
// environment variable, comm buffers for the kernel's executor) and the host
// (image outputs of a cell).
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace gpubox {

// The bytes text encodes; line breaks are skipped, '=' padding may only end it.
// nullopt when text holds any other character or data after the padding.
std::optional<std::string> base64_decode(std::string_view text);

// bytes encoded, with '=' padding and no line breaks.
std::string base64_encode(std::string_view bytes);

}  // namespace gpubox
