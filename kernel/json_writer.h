// Compact JSON exactly as nlohmann's dump(-1, ' ', false, handler) writes it,
// with strings written by copying runs of plain bytes at once: nlohmann's
// writer goes byte by byte through a UTF-8 decoder, which was two thirds of
// the agent's time on a 20 MB stream.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace gpubox::kernel {

// Appends value to out (invalid UTF-8 replaced by U+FFFD, or dropped, as the
// handler says; strict throws nlohmann's own type_error).
void append_json(std::string& out, const nlohmann::json& value, nlohmann::json::error_handler_t handler);

}  // namespace gpubox::kernel
