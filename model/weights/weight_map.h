// Parses model.safetensors.index.json: its weight_map, tensor name → shard
// file, each file a plain name inside the model directory. Private to
// model/weights/; any thread.
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "base/status.h"

namespace gpubox::weights {

// invalid_request, prefixed by label, for text that is not a JSON object
// with a "weight_map" object of strings, for a duplicate key anywhere
// (nlohmann would keep the last silently), and for a file name that is not
// plain (is_plain_file_name).
Result<std::map<std::string, std::string>> parse_weight_map(std::string_view text, const std::string& label);

}  // namespace gpubox::weights
