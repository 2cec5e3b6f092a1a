// archive_layer(): a local sandbox's overlayfs upper layer as one tar + zstd
// archive (pax, so xattrs travel) that base/safe_extractor.h's extract_layer()
// puts back. Kept: directories, files (hard links as links), symlinks,
// whiteouts (0/0 character devices), owners as the sandbox sees them, modes,
// mtimes, and the xattrs trusted.overlay.opaque and user.*. Left out:
// sockets, FIFOs, other device nodes, every other xattr (overlayfs's
// origin/impure bookkeeping, security.*, ACLs), and the excluded paths with
// everything below them. The sandbox may run meanwhile: the layer is only
// read, never followed through a symlink. Reentrant; one call per thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace gpubox::host {

struct LayerArchiveRequest {
  std::string upper;         // the upper layer's directory
  std::string archive_path;  // written here (replaced when present)
  // Sandbox paths ("/proc") whose entries and subtrees stay out: mount
  // points, and what the sandbox never saw through its overlay.
  std::vector<std::string> excluded;
  // Host id = sandbox id + base for ids below base + count (--userns); an id
  // outside is written as nobody (65534). Without a range, base 0.
  std::uint32_t uid_base = 0;
  std::uint32_t gid_base = 0;
  std::uint64_t count = 1ULL << 32;
};

struct LayerArchive {
  std::uint64_t entries = 0;
  std::uint64_t skipped = 0;  // sockets, FIFOs, device nodes
  std::uint64_t size = 0;     // of the archive
  std::string sha256;         // of the archive
};

// Writes the archive. On failure no archive is left.
Result<LayerArchive> archive_layer(const LayerArchiveRequest& request);

// The lower-case hex sha256 of a file, and its size.
Result<std::string> file_sha256(const std::string& path, std::uint64_t* size);

}  // namespace gpubox::host
