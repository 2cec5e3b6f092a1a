#include "base/manifest.h"

namespace gpubox::jobs {

using nlohmann::json;

json Manifest::to_json() const {
  json files = json::array();
  for (const auto& entry : entries) {
    json item = {{"path", entry.path}, {"type", entry.type}, {"size", entry.size}};
    if (entry.type == "file") item["sha256"] = entry.sha256;
    if (entry.type == "symlink") item["target"] = entry.target;
    if (entry.incomplete) item["incomplete"] = true;
    files.push_back(std::move(item));
  }
  return json{{"files", std::move(files)},
              {"missing", missing},
              {"archive", {{"name", archive_name}, {"format", "tar+zstd"}, {"size", archive_size}, {"sha256", archive_sha256}}}};
}

Manifest Manifest::from_json(const json& value) {
  Manifest manifest;
  if (value.contains("files") && value["files"].is_array()) {
    for (const auto& item : value["files"]) {
      ManifestEntry entry;
      entry.path = item.value("path", "");
      entry.type = item.value("type", "file");
      entry.size = item.value("size", std::uint64_t{0});
      entry.sha256 = item.value("sha256", "");
      entry.target = item.value("target", "");
      entry.incomplete = item.value("incomplete", false);
      manifest.entries.push_back(std::move(entry));
    }
  }
  if (value.contains("missing") && value["missing"].is_array()) {
    for (const auto& item : value["missing"]) {
      if (item.is_string()) manifest.missing.push_back(item.get<std::string>());
    }
  }
  if (value.contains("archive") && value["archive"].is_object()) {
    const json& archive = value["archive"];
    manifest.archive_name = archive.value("name", "archive.tar.zst");
    manifest.archive_size = archive.value("size", std::uint64_t{0});
    manifest.archive_sha256 = archive.value("sha256", "");
  }
  return manifest;
}

}  // namespace gpubox::jobs
