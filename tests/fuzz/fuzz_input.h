// How the fuzz targets cut one libFuzzer input into ZeroMQ frames and
// messages. Frames are length-prefixed (2 bytes, little endian); a length that
// runs past the end takes what is left, so every input means something.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace gpubox::fuzz {

// Reads from the front of an input, never past its end.
class InputCursor {
 public:
  InputCursor(const std::uint8_t* data, std::size_t size)
      : rest_(reinterpret_cast<const char*>(data), size) {}  // NOLINT: bytes as chars

  bool empty() const { return rest_.empty(); }
  std::uint8_t byte() {
    if (rest_.empty()) return 0;
    auto value = static_cast<std::uint8_t>(rest_[0]);
    rest_.remove_prefix(1);
    return value;
  }
  // One frame: 2-byte little-endian length, then that many bytes (or what is left).
  std::string_view frame() {
    std::size_t length = byte();
    length |= static_cast<std::size_t>(byte()) << 8;
    std::string_view out = rest_.substr(0, length);
    rest_.remove_prefix(out.size());
    return out;
  }
  std::string_view rest() const { return rest_; }

 private:
  std::string_view rest_;
};

// The whole input as one multipart message: frames until the input ends (at most max_frames).
inline std::vector<std::string_view> split_frames(const std::uint8_t* data, std::size_t size, std::size_t max_frames) {
  InputCursor cursor(data, size);
  std::vector<std::string_view> frames;
  while (!cursor.empty() && frames.size() < max_frames) frames.push_back(cursor.frame());
  return frames;
}

// Several messages: each is a frame count (1 byte, at most max_frames) then its frames.
inline std::vector<std::vector<std::string_view>> split_messages(const std::uint8_t* data, std::size_t size,
                                                                 std::size_t max_messages, std::size_t max_frames) {
  InputCursor cursor(data, size);
  std::vector<std::vector<std::string_view>> messages;
  while (!cursor.empty() && messages.size() < max_messages) {
    std::size_t count = cursor.byte() % (max_frames + 1);
    std::vector<std::string_view> frames;
    for (std::size_t i = 0; i < count && !cursor.empty(); ++i) frames.push_back(cursor.frame());
    if (!frames.empty()) messages.push_back(std::move(frames));
  }
  return messages;
}

}  // namespace gpubox::fuzz
