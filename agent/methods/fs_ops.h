// Filesystem operations behind the fs.* RPC methods (rpc/PROTOCOL.md, "Files"),
// free of the RPC layer so they read as plain POSIX steps. Every failure is a
// Status whose message names the RPC param it concerns ("params.path: …").
// Paths are absolute and NUL-free (the caller checked them with ParamReader).
// Functions are reentrant; each object belongs to the thread that made it.
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "base/fd.h"
#include "base/background_sha256.h"
#include "base/status.h"

namespace gpubox::fs {

// "file", "dir", "symlink" or "other".
std::string_view type_name(mode_t mode);
// {"type", "size", "mode", "mtime", "uid", "gid"} of an lstat result; mode is
// the permission bits (& 07777), mtime seconds since the epoch as a float.
nlohmann::json describe(const struct stat& st);

// fs.stat: lstat, plus "target" for a symlink.
Result<nlohmann::json> stat_path(const std::string& path);

// fs.list: entries under dir up to depth levels (1: its children), depth
// first, names sorted within each directory. Never follows a symlink below
// dir and never enters a directory twice (bind-mount loops). Stops after
// max_entries and reports "truncated". A subdirectory that cannot be opened
// is listed but not entered.
Result<nlohmann::json> list_tree(const std::string& dir, int depth, std::size_t max_entries);

// fs.mkdir: one directory with exactly mode (umask ignored); with parents,
// its missing ancestors too (mode 0755) and an existing directory is fine.
Status make_directory(const std::string& path, mode_t mode, bool parents);

// fs.remove: a file, symlink or empty directory; with recursive, a directory
// and everything below it, never following symlinks and never crossing into
// another filesystem (mount points are reported as busy, not entered).
Status remove_path(const std::string& path, bool recursive);

// fs.move: rename(2); across filesystems, a copy (files, directories,
// symlinks; modes and mtimes kept) built beside `to`, renamed into place,
// then the source removed. Without overwrite an existing `to` is refused.
Status move_path(const std::string& from, const std::string& to, bool overwrite);

// A file written beside its target and renamed over it on commit(): readers
// see the old content or the new, never a mix. Until commit() succeeds the
// target is untouched; the destructor removes an uncommitted temp file.
class AtomicFile {
 public:
  // Checks the target (not a directory; parent present, or created with
  // parents) and creates the temp file with exactly mode.
  static Result<std::unique_ptr<AtomicFile>> create(const std::string& target, mode_t mode, bool parents);
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  ~AtomicFile();

  // Appends bytes and feeds them to the running SHA-256, which hashes them on
  // its own thread (BackgroundSha256) while this one writes: data must stay
  // unchanged while owner lives.
  Status write(std::shared_ptr<const void> owner, const void* data, std::size_t size);
  std::uint64_t size() const { return size_; }
  // The SHA-256 of everything written (waiting for the hasher); call once, after the last write.
  std::string sha256_hex() { return hash_.hex_digest(); }
  // fsync, rename over the target, fsync the directory.
  Status commit();

 private:
  AtomicFile(std::string target, std::string temp, Fd fd);

  std::string target_;
  std::string temp_;
  Fd fd_;
  BackgroundSha256 hash_{4};  // at most 4 buffers waiting to be hashed
  std::uint64_t size_ = 0;
  std::uint64_t flushed_ = 0;  // bytes handed to writeback so far
  bool committed_ = false;
  static constexpr std::uint64_t kWritebackBytes = 8 << 20;
};

}  // namespace gpubox::fs
