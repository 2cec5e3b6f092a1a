// Files only modeld reads and writes (its models file, the functions and SAEs
// it keeps for a restart): each written whole beside its place and renamed
// over it, so a crash leaves the old file or the new one, never a part. Any thread.
#pragma once

#include <string>
#include <string_view>

#include "base/status.h"

namespace gpubox::modeld {

// Replaces the file at path with bytes (path + ".new", synced, renamed; mode 0600).
Status write_private_file(const std::string& path, std::string_view bytes);

// The whole file at path; not_found or the errno's code naming path when it cannot be read.
Result<std::string> read_private_file(const std::string& path);

}  // namespace gpubox::modeld
