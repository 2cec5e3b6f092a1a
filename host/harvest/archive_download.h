// Downloading a job's staged archive (job.download, rpc/PROTOCOL.md "Jobs"):
// resumable from what an earlier, interrupted download left in DEST.partial,
// sha256-checked against the agent's manifest before DEST appears. For the
// CLI (`gpubox result`) and tests; runs on the calling thread, which owns the
// Client.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "rpc/client.h"
#include "base/status.h"

namespace gpubox::harvest {

struct DownloadOptions {
  std::string job_id;
  std::string destination;               // the archive lands here; DEST.partial meanwhile
  std::optional<std::uint64_t> max_bytes;  // the size cap: a larger archive is result_rejected (and kept by the agent)
  // Called after each chunk with the bytes present so far and the total.
  std::function<void(std::uint64_t done, std::uint64_t total)> progress;
  std::uint64_t window = 16;              // chunks (1 MiB) in flight
};

struct DownloadResult {
  std::uint64_t size = 0;
  std::string sha256;
  std::uint64_t resumed_from = 0;  // bytes that were already in DEST.partial
  nlohmann::json manifest;         // the agent's manifest of the archive
};

// Errors: the agent's (result_rejected, busy while the job runs, not_found
// once acknowledged, …), or input_changed when the bytes received do not hash
// to the manifest's sha256 (DEST.partial is then removed so that a retry
// starts afresh).
Result<DownloadResult> download_job_archive(rpc::Client& client, const DownloadOptions& options);

}  // namespace gpubox::harvest
