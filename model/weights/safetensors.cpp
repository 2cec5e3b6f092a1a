#include "model/weights/safetensors.h"

#include "model/weights/header_parser.h"
#include "model/weights/mapped_file.h"

namespace gpubox::weights {

Result<std::unique_ptr<SafetensorsFile>> SafetensorsFile::open(const std::string& path, OpenOptions options) {
  auto mapping = MappedFile::open(path);
  if (!mapping) return mapping.status();
  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->path_ = path;
  file->mapping_ = std::move(mapping).value();
  if (auto status = file->load(options); !status) return status;
  return file;
}

Result<std::unique_ptr<SafetensorsFile>> SafetensorsFile::from_bytes(std::string label, std::vector<std::byte> bytes,
                                                                     OpenOptions options) {
  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->path_ = std::move(label);
  file->owned_ = std::move(bytes);
  if (auto status = file->load(options); !status) return status;
  return file;
}

SafetensorsFile::~SafetensorsFile() = default;

Status SafetensorsFile::load(const OpenOptions& options) {
  std::span<const std::byte> whole = mapping_ ? mapping_->bytes() : std::span<const std::byte>(owned_);
  auto parsed = parse_safetensors(whole, options, path_);
  if (!parsed) return parsed.status();
  data_ = whole.subspan(parsed->data_start);
  tensors_ = std::move(parsed->tensors);
  metadata_ = std::move(parsed->metadata);
  for (std::size_t i = 0; i < tensors_.size(); ++i) by_name_.emplace(tensors_[i].name, i);
  return Status::ok();
}

const TensorEntry* SafetensorsFile::find(std::string_view name) const {
  auto found = by_name_.find(name);
  return found == by_name_.end() ? nullptr : &tensors_[found->second];
}

std::span<const std::byte> SafetensorsFile::bytes(const TensorEntry& entry) const {
  // An entry from elsewhere gets nothing rather than bytes outside the data section.
  if (entry.offset > data_.size() || entry.size > data_.size() - entry.offset) return {};
  return data_.subspan(entry.offset, entry.size);
}

Status SafetensorsFile::still_intact() const { return mapping_ ? mapping_->still_intact() : Status::ok(); }

}  // namespace gpubox::weights
