// A local directory packed for `gpubox submit --input DIR`: a plain tar
// (pax) of its tree — directories, regular files and symlinks, never
// followed; anything else is skipped with a warning — written to a temp
// file that is removed when the InputArchive goes. The agent checks its
// sha256 and unpacks it with the safe extractor. One thread.
#pragma once

#include <memory>
#include <string>

#include "base/status.h"

namespace gpubox::host::cli {

class InputArchive {
 public:
  // Packs dir into a new temp file under $TMPDIR (else /tmp).
  static Result<std::unique_ptr<InputArchive>> pack(const std::string& dir);
  ~InputArchive();
  InputArchive(const InputArchive&) = delete;
  InputArchive& operator=(const InputArchive&) = delete;

  const std::string& path() const { return path_; }

 private:
  explicit InputArchive(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

}  // namespace gpubox::host::cli
