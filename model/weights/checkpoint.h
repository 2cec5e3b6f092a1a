// The weights of one Hugging Face model directory: model.safetensors, or the
// model-*.safetensors shards that model.safetensors.index.json names.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model/weights/safetensors.h"

namespace gpubox::weights {

// Every file validated and every tensor's home known before open_dir
// returns; immutable afterwards, so any thread may read it at once.
class Checkpoint {
 public:
  // model.safetensors when the directory has one (as transformers prefers
  // it), else the index and its shards. The index may name only files
  // directly inside dir (no '/', no "..", nothing absolute); every tensor it
  // lists must be in its shard, no tensor may be in two shards, and no shard
  // may hold a tensor the index does not list. A directory with only
  // pickle weights (*.bin) is refused: gpubox never unpickles.
  static Result<std::unique_ptr<Checkpoint>> open_dir(const std::string& dir, OpenOptions options = {});
  ~Checkpoint();
  Checkpoint(const Checkpoint&) = delete;
  Checkpoint& operator=(const Checkpoint&) = delete;

  struct Located {
    const SafetensorsFile* file;
    const TensorEntry* entry;
  };
  std::optional<Located> find(std::string_view name) const;
  // Every tensor's name, sorted.
  std::vector<std::string> names() const;
  // The sum of the files' data sections.
  std::uint64_t total_bytes() const;
  // Sorted by file name (one file for model.safetensors).
  const std::vector<std::unique_ptr<SafetensorsFile>>& files() const { return files_; }
  const std::string& dir() const { return dir_; }

 private:
  Checkpoint() = default;
  Status open_single(const std::string& path, const OpenOptions& options);
  Status open_sharded(const std::string& index_path, const OpenOptions& options);

  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, Located, std::less<>> tensors_;
};

// True when name may stand for a file directly inside a directory: not empty,
// no '/', no NUL, not "." or "..".
bool is_plain_file_name(std::string_view name);

}  // namespace gpubox::weights
