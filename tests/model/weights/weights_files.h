// Hand-made safetensors files for the tests: any header text, any data, in a
// temporary directory that goes away with the object. One thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace gpubox::weights::testing {

// The bytes of a safetensors file: the 8-byte little-endian length of header, header, data.
std::vector<std::byte> file_bytes(const std::string& header, const std::string& data);
// The same with a length field that says header_length whatever header's size is.
std::vector<std::byte> file_bytes_with_length(std::uint64_t header_length, const std::string& header,
                                              const std::string& data);

class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  // Writes bytes to path()/name; returns the full path.
  std::string write(const std::string& name, const std::vector<std::byte>& bytes) const;
  std::string write_text(const std::string& name, const std::string& text) const;

 private:
  std::string path_;
};

}  // namespace gpubox::weights::testing
