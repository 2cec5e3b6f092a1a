// Length-prefixed JSON frames on the agent's private channel to the Python
// executor: a 4-byte big-endian length, then one UTF-8 JSON object.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace gpubox::kernel {

// Largest frame either side accepts (a big display_data PNG fits).
inline constexpr uint32_t kMaxFrameBytes = 512u << 20;

// Writes one frame to fd (blocking; retries EINTR and short writes, waits out EAGAIN).
Status write_frame(int fd, std::string_view payload);

// Accumulates bytes read from a non-blocking fd and splits them into frames.
// One thread at a time.
class FrameReader {
 public:
  enum class Fill { more, eof, error };
  // Reads what fd has now (until EAGAIN). eof once the peer closed its end.
  Fill fill(int fd);
  // The next complete frame's payload, or false when none is complete yet.
  bool next(std::string& payload);
  bool oversized() const { return oversized_; }

 private:
  std::string buffer_;
  size_t offset_ = 0;
  bool oversized_ = false;
};

// User code shares the executor's process and can write anything to the
// channel. A frame the agent acts on must be a JSON object with a string
// "type" whose known fields have their documented types; otherwise *why
// names the first offending field. Unknown fields are allowed.
bool well_formed_frame(const nlohmann::json& frame, std::string* why);

}  // namespace gpubox::kernel
