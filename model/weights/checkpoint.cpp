#include "model/weights/checkpoint.h"

#include <sys/stat.h>

#include <cerrno>
#include <set>

#include "model/weights/mapped_file.h"
#include "model/weights/weight_map.h"

namespace gpubox::weights {
namespace {

constexpr char kSingleName[] = "model.safetensors";
constexpr char kIndexName[] = "model.safetensors.index.json";

bool exists(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0;
}

Status refuse(const std::string& label, const std::string& what) {
  return Status(ErrorCode::invalid_request, label + ": " + what);
}

// index.json's weight_map, read whole (up to the header cap) and parsed.
Result<std::map<std::string, std::string>> read_weight_map(const std::string& index_path, const OpenOptions& options) {
  auto mapping = MappedFile::open(index_path);
  if (!mapping) return mapping.status();
  auto bytes = (*mapping)->bytes();
  if (bytes.size() > options.max_header_bytes) {
    return refuse(index_path, "the index is " + std::to_string(bytes.size()) + " bytes, over the cap of " +
                                  std::to_string(options.max_header_bytes));
  }
  return parse_weight_map(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()),  // NOLINT
                          index_path);
}

// The message for a directory without safetensors weights.
Status no_weights(const std::string& dir) {
  for (const char* pickle : {"pytorch_model.bin", "pytorch_model.bin.index.json", "model.bin"}) {
    if (exists(dir + "/" + pickle)) {
      return Status(ErrorCode::not_found,
                    dir + ": no safetensors weights, only " + pickle + " (pickle), which gpubox never loads: it can execute code. "
                          "Convert it to safetensors (transformers: save_pretrained(dir, safe_serialization=True))");
    }
  }
  return Status(ErrorCode::not_found, dir + ": neither " + kSingleName + " nor " + kIndexName + " is there");
}

}  // namespace

Result<std::unique_ptr<Checkpoint>> Checkpoint::open_dir(const std::string& dir, OpenOptions options) {
  struct stat info {};
  if (::stat(dir.c_str(), &info) != 0) return Status::from_errno(errno, "cannot open '" + dir + "'");
  if (!S_ISDIR(info.st_mode)) return Status(ErrorCode::invalid_request, dir + ": not a directory");
  std::unique_ptr<Checkpoint> checkpoint(new Checkpoint());
  checkpoint->dir_ = dir;
  Status status;
  if (exists(dir + "/" + kSingleName)) {
    status = checkpoint->open_single(dir + "/" + kSingleName, options);
  } else if (exists(dir + "/" + kIndexName)) {
    status = checkpoint->open_sharded(dir + "/" + kIndexName, options);
  } else {
    status = no_weights(dir);
  }
  if (!status) return status;
  return checkpoint;
}

Checkpoint::~Checkpoint() = default;

Status Checkpoint::open_single(const std::string& path, const OpenOptions& options) {
  auto file = SafetensorsFile::open(path, options);
  if (!file) return file.status();
  files_.push_back(std::move(file).value());
  for (const auto& entry : files_.back()->tensors()) tensors_.emplace(entry.name, Located{files_.back().get(), &entry});
  return Status::ok();
}

Status Checkpoint::open_sharded(const std::string& index_path, const OpenOptions& options) {
  auto weight_map = read_weight_map(index_path, options);
  if (!weight_map) return weight_map.status();
  std::set<std::string> file_names;
  for (const auto& [name, file_name] : *weight_map) file_names.insert(file_name);
  std::map<std::string, const SafetensorsFile*> shards;
  for (const auto& file_name : file_names) {
    auto file = SafetensorsFile::open(dir_ + "/" + file_name, options);
    if (!file) return file.status();
    files_.push_back(std::move(file).value());
    shards.emplace(file_name, files_.back().get());
  }
  for (const auto& file : files_) {
    for (const auto& entry : file->tensors()) {
      auto [at, added] = tensors_.emplace(entry.name, Located{file.get(), &entry});
      if (!added) {
        return refuse(index_path, "tensor '" + entry.name + "' is in two shards, " + at->second.file->path() + " and " +
                                      file->path());
      }
      auto listed = weight_map->find(entry.name);
      if (listed == weight_map->end()) {
        return refuse(index_path, "tensor '" + entry.name + "' of " + file->path() + " is not in weight_map");
      }
    }
  }
  for (const auto& [name, file_name] : *weight_map) {
    auto found = tensors_.find(name);
    if (found == tensors_.end() || found->second.file != shards.at(file_name)) {
      return refuse(index_path, "weight_map puts tensor '" + name + "' in " + file_name + ", which does not hold it");
    }
  }
  return Status::ok();
}

std::optional<Checkpoint::Located> Checkpoint::find(std::string_view name) const {
  auto found = tensors_.find(name);
  if (found == tensors_.end()) return std::nullopt;
  return found->second;
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> names;
  names.reserve(tensors_.size());
  for (const auto& [name, located] : tensors_) names.push_back(name);
  return names;
}

std::uint64_t Checkpoint::total_bytes() const {
  std::uint64_t total = 0;
  for (const auto& file : files_) total += file->data_bytes();
  return total;
}

}  // namespace gpubox::weights
