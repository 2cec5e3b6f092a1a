// A regular file mapped read-only (PROT_READ, MAP_PRIVATE) once, for its
// whole life; the mapping is immutable, so any thread may read it.
//
// Risk that remains: a file truncated by someone else after open makes a
// read of the lost pages raise SIGBUS (MAP_PRIVATE does not copy pages that
// were never touched). open() refuses a file whose size it cannot trust
// (not regular); still_intact() re-reads the size of the same inode, so
// callers can check before a long read, which narrows the window but cannot
// close it. Files in a model directory are expected to stay put.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "base/status.h"

namespace gpubox::weights {

class MappedFile {
 public:
  // not_found / permission_denied from the open, invalid_request for a file that is not regular.
  static Result<std::unique_ptr<MappedFile>> open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  std::span<const std::byte> bytes() const { return {data_, size_}; }
  // ok while the file still has the size it had at open; else an error naming path.
  Status still_intact() const;

 private:
  MappedFile(std::string path, int fd, const std::byte* data, std::size_t size)
      : path_(std::move(path)), fd_(fd), data_(data), size_(size) {}

  std::string path_;
  int fd_;  // kept open so that still_intact() stats the same inode
  const std::byte* data_;
  std::size_t size_;
};

}  // namespace gpubox::weights
