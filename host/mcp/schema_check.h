// Checks a tool call's arguments against the tool's inputSchema: the JSON
// Schema subset tool schemas use (type, properties, required,
// additionalProperties, items, enum, const, anyOf/oneOf, minimum/maximum,
// minLength). Unknown keywords are ignored. Pure; any thread.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace gpubox::mcp {

// The first problem found, naming the field ("arguments.code: expected a
// string, got 3"), or "" when the arguments conform.
std::string check_arguments(const nlohmann::json& schema, const nlohmann::json& arguments);

}  // namespace gpubox::mcp
