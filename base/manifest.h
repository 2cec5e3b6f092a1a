// Manifest: what a staged archive holds — per file its path in the archive,
// size and sha256 — and the archive's own size and sha256. Plain data; any thread.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace gpubox::jobs {

struct ManifestEntry {
  std::string path;     // in the archive: "out/…", "stdout.log", "stderr.log"
  std::string type;     // "file", "dir" or "symlink"
  std::uint64_t size = 0;
  std::string sha256;   // files only
  std::string target;   // symlinks only
  bool incomplete = false;  // a read error: the archived copy is padded with zeros past it
};

struct Manifest {
  std::vector<ManifestEntry> entries;
  std::vector<std::string> missing;  // "path: reason" for files not in the archive
  std::string archive_name = "archive.tar.zst";
  std::uint64_t archive_size = 0;
  std::string archive_sha256;

  nlohmann::json to_json() const;
  static Manifest from_json(const nlohmann::json& value);
};

}  // namespace gpubox::jobs
