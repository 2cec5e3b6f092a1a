// The `gpubox create` flags that backends define (Backend::own_flags), across
// a list of backends (the registry's, or a test's): which to parse, which
// backends define one, and the refusal of a flag the chosen backend does not
// take. Pure; any thread.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "host/args.h"
#include "host/backends/backend.h"
#include "base/status.h"

namespace gpubox::host {

// Every flag the backends define, once each, in registration order.
std::vector<BackendFlag> backend_flags(const std::vector<const Backend*>& backends);

// The backends that define flag (not those that borrow it), in registration order.
std::vector<const Backend*> backends_defining(const std::string& flag, const std::vector<const Backend*>& backends);

// Whether backend takes flag: one of its own, or one it borrows.
bool takes_flag(const Backend& backend, const std::string& flag);

// --image into *image when given: an image reference, else invalid_request naming it.
Status read_image_flag(const Args& flags, std::string* image);

// --ready-timeout (seconds from min_s to 3600) into *timeout when given, else invalid_request naming it.
Status read_ready_timeout_flag(const Args& flags, double min_s, std::chrono::milliseconds* timeout);

// "FLAG: only with --backend A or B" (A, B: the backends that define it) for the first flag given
// that chosen does not take, else ok.
Status refuse_foreign_flags(const Args& flags, const Backend& chosen, const std::vector<const Backend*>& backends);

}  // namespace gpubox::host
