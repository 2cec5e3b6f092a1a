// Builds tar archives (optionally zstd-compressed) entry by entry with
// libarchive, hostile ones included, for the extractor's tests and its fuzz
// corpus. Test code only; one thread.
#pragma once

#include <archive.h>
#include <archive_entry.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <string>
#include <vector>

namespace gpubox::test {

struct TarEntry {
  std::string path;
  mode_t type = AE_IFREG;  // AE_IFREG, AE_IFDIR, AE_IFLNK, AE_IFCHR, AE_IFIFO
  std::string content;     // files
  std::string link;        // symlink target, or hard-link target with hardlink
  bool hardlink = false;
  mode_t mode = 0644;
  std::int64_t declared_size = -1;  // -1: content.size()
};

inline TarEntry file_entry(std::string path, std::string content, mode_t mode = 0644) {
  TarEntry e;
  e.path = std::move(path);
  e.content = std::move(content);
  e.mode = mode;
  return e;
}
inline TarEntry dir_entry(std::string path) {
  TarEntry e;
  e.path = std::move(path);
  e.type = AE_IFDIR;
  e.mode = 0755;
  return e;
}
inline TarEntry symlink_entry(std::string path, std::string target) {
  TarEntry e;
  e.path = std::move(path);
  e.type = AE_IFLNK;
  e.link = std::move(target);
  return e;
}
inline TarEntry hardlink_entry(std::string path, std::string target) {
  TarEntry e;
  e.path = std::move(path);
  e.link = std::move(target);
  e.hardlink = true;
  return e;
}
inline TarEntry special_entry(std::string path, mode_t type) {
  TarEntry e;
  e.path = std::move(path);
  e.type = type;
  return e;
}

// The archive's bytes; zstd-compressed unless plain.
inline std::string build_tar(const std::vector<TarEntry>& entries, bool zstd = true) {
  std::string bytes;
  struct archive* a = archive_write_new();
  archive_write_set_format_pax_restricted(a);
  if (zstd) archive_write_add_filter_zstd(a);
  archive_write_set_bytes_in_last_block(a, 1);
  archive_write_open2(
      a, &bytes, nullptr,
      [](struct archive*, void* out, const void* buffer, size_t length) -> la_ssize_t {
        static_cast<std::string*>(out)->append(static_cast<const char*>(buffer), length);
        return static_cast<la_ssize_t>(length);
      },
      nullptr, nullptr);
  for (const auto& e : entries) {
    archive_entry* entry = archive_entry_new();
    archive_entry_set_pathname(entry, e.path.c_str());
    archive_entry_set_perm(entry, e.mode);
    if (e.hardlink) {
      archive_entry_set_filetype(entry, AE_IFREG);
      archive_entry_set_hardlink(entry, e.link.c_str());
      archive_entry_set_size(entry, 0);
    } else {
      archive_entry_set_filetype(entry, e.type);
      if (e.type == AE_IFLNK) archive_entry_set_symlink(entry, e.link.c_str());
      if (e.type == AE_IFCHR) archive_entry_set_rdev(entry, makedev(1, 3));
      std::int64_t size = e.type == AE_IFREG ? (e.declared_size >= 0 ? e.declared_size : static_cast<std::int64_t>(e.content.size())) : 0;
      archive_entry_set_size(entry, size);
    }
    archive_write_header(a, entry);
    if (!e.hardlink && e.type == AE_IFREG && !e.content.empty()) archive_write_data(a, e.content.data(), e.content.size());
    archive_entry_free(entry);
  }
  archive_write_close(a);
  archive_write_free(a);
  return bytes;
}

}  // namespace gpubox::test
