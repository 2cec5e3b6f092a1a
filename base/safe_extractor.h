// SafeExtractor (namespace harvest, where it began): unpacks a job archive (tar, optionally zstd/gzip/xz
// compressed) into a fresh destination directory, refusing anything that
// could write outside it or harm the host: absolute paths, "..", paths
// through a symlink, links pointing outside, device files, FIFOs and sockets,
// setuid/setgid bits, duplicate entries, and decompression bombs (a cap on
// the total bytes written and on the number of entries). Every refusal names
// the entry and the rule. Used by the host for job results and by the agent
// for a directory sent as a job input; extract_layer() is the same with an
// overlayfs upper layer's metadata kept. Reentrant; any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "base/status.h"

namespace gpubox::harvest {

struct ExtractLimits {
  std::uint64_t max_total_bytes = 64ULL << 30;  // file content written, all entries together
  std::uint64_t max_entries = 1'000'000;
};

struct ExtractReport {
  std::uint64_t files = 0;
  std::uint64_t dirs = 0;
  std::uint64_t symlinks = 0;
  std::uint64_t hardlinks = 0;
  std::uint64_t bytes = 0;
  std::uint64_t whiteouts = 0;     // extract_layer only
  std::uint64_t setid_cleared = 0; // extract_layer only: files whose setuid/setgid bits were dropped
};

// How extract_layer() places ids: an archive's uid N becomes uid_base + N on
// disk (the sandbox's range under --userns, else 0); ids from count on are refused.
struct LayerIds {
  std::uint32_t uid_base = 0;
  std::uint32_t gid_base = 0;
  std::uint64_t count = 1ULL << 32;
};

// Extracts into dest, which must not exist (it is created, mode 0755). On any
// refusal or error, dest is removed again: the caller never sees half an
// archive. Errors: invalid_request (a refused entry or a corrupt archive,
// naming it), resource_exhausted (a limit), or the filesystem's error.
Result<ExtractReport> extract_archive(const std::string& archive_path, const std::string& dest, const ExtractLimits& limits = {});
// The same from bytes in memory (the fuzz target's entry point).
Result<ExtractReport> extract_archive_memory(const void* data, std::size_t size, const std::string& dest,
                                             const ExtractLimits& limits = {});

// extract_archive() for an overlayfs upper layer (a local sandbox's
// snapshot): the same refusals, but owners (through ids), modes, mtimes,
// whiteouts (0/0 character devices, the only device nodes allowed) and the
// xattrs trusted.overlay.opaque ("y") and user.* are kept; any other xattr
// is refused. Setuid and setgid bits are dropped from everything but
// directories (a sandbox's overlay is nosuid and its processes run with
// no_new_privs: the bits never worked there). REQUIRES: root (chown, mknod,
// trusted xattrs).
Result<ExtractReport> extract_layer(const std::string& archive_path, const std::string& dest, const LayerIds& ids,
                                    const ExtractLimits& limits = {});

// The xattrs an upper layer keeps (both ways): trusted.overlay.opaque with
// the value "y" (overlayfs's opaque directory) and user.*.
bool layer_xattr_kept(const std::string& name, const void* value, std::size_t size);

// Checks an extracted tree against a job manifest ({"files": [{path, type, size, sha256}]}):
// every file present with its size and sha256. Names the first mismatch.
Status verify_manifest(const std::string& dest, const nlohmann::json& manifest);

// Whether a path inside an archive is acceptable: relative, no "..", no empty
// component; "./" prefixes are allowed. Sets *normal to it without them.
bool normalize_entry_path(const std::string& path, std::string* normal);

}  // namespace gpubox::harvest
