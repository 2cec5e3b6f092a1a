// One safetensors file, validated whole before any of it is used, its data
// read in place from a read-only mapping.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "model/weights/dtype.h"
#include "model/weights/element.h"
#include "model/weights/tensor_entry.h"
#include "base/status.h"

namespace gpubox::weights {

class MappedFile;

// A validated safetensors file: its tensors and metadata, and their bytes in
// the file's mapping (MAP_PRIVATE, PROT_READ; see mapped_file.h for the one
// risk left, a file truncated under us). Immutable after open: any thread
// may read it at once.
class SafetensorsFile {
 public:
  // Maps path once and validates it (header_parser.h). Errors name the file
  // and, where there is one, the tensor: invalid_request for a bad file,
  // not_found / permission_denied from the open.
  static Result<std::unique_ptr<SafetensorsFile>> open(const std::string& path, OpenOptions options = {});
  // The same checks on bytes already in memory (the file keeps its own copy);
  // label stands for the path in errors and path().
  static Result<std::unique_ptr<SafetensorsFile>> from_bytes(std::string label, std::vector<std::byte> bytes,
                                                             OpenOptions options = {});
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  // In data order (by offset; then by name for empty tensors at one offset).
  const std::vector<TensorEntry>& tensors() const { return tensors_; }
  // nullptr when no tensor has that name.
  const TensorEntry* find(std::string_view name) const;
  // The tensor's bytes in the mapping, no copy (empty for an entry that
  // does not lie inside the data section, as none of tensors() does).
  std::span<const std::byte> bytes(const TensorEntry& entry) const;
  // "__metadata__" (empty when the file has none).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Length of the data section (the sum of the tensors' sizes).
  std::uint64_t data_bytes() const { return data_.size(); }
  // true when bytes() lie in a read-only private mapping of the file (open),
  // false when in memory the file owns (from_bytes).
  bool mapped() const { return mapping_ != nullptr; }
  // ok while the file on disk still has the size it had at open (always, from_bytes).
  Status still_intact() const;

 private:
  SafetensorsFile() = default;
  Status load(const OpenOptions& options);

  std::string path_;
  std::unique_ptr<MappedFile> mapping_;  // one of mapping_ and owned_ holds the bytes
  std::vector<std::byte> owned_;
  std::span<const std::byte> data_;
  std::vector<TensorEntry> tensors_;
  std::map<std::string, std::size_t, std::less<>> by_name_;  // index into tensors_
  std::map<std::string, std::string> metadata_;
};

}  // namespace gpubox::weights
