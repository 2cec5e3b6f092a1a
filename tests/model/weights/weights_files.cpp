#include "tests/model/weights/weights_files.h"

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>

namespace gpubox::weights::testing {

std::vector<std::byte> file_bytes_with_length(std::uint64_t header_length, const std::string& header,
                                              const std::string& data) {
  std::vector<std::byte> bytes;
  for (int i = 0; i < 8; ++i) bytes.push_back(static_cast<std::byte>((header_length >> (8 * i)) & 0xff));
  for (char c : header) bytes.push_back(static_cast<std::byte>(c));
  for (char c : data) bytes.push_back(static_cast<std::byte>(c));
  return bytes;
}

std::vector<std::byte> file_bytes(const std::string& header, const std::string& data) {
  return file_bytes_with_length(header.size(), header, data);
}

TempDir::TempDir() {
  std::string pattern = (std::filesystem::temp_directory_path() / "gpubox-weights-XXXXXX").string();
  if (!::mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed");
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

std::string TempDir::write(const std::string& name, const std::vector<std::byte>& bytes) const {
  std::string full = path_ + "/" + name;
  std::ofstream out(full, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));  // NOLINT
  return full;
}

std::string TempDir::write_text(const std::string& name, const std::string& text) const {
  std::vector<std::byte> bytes;
  for (char c : text) bytes.push_back(static_cast<std::byte>(c));
  return write(name, bytes);
}

}  // namespace gpubox::weights::testing
