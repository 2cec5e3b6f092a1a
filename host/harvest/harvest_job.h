// harvest_job: what `gpubox result` does — download a finished job's staged
// archive (resumable, sha256-checked, size-capped), extract it with the
// hardened extractor into a fresh directory, and check every file against
// the manifest. Runs on the calling thread, which owns the Client.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "base/safe_extractor.h"
#include "rpc/client.h"
#include "base/status.h"

namespace gpubox::harvest {

struct HarvestOptions {
  std::string job_id;
  std::string out_dir;  // created; must not exist. The archive is kept beside it as OUT_DIR.tar.zst
  std::optional<std::uint64_t> max_bytes;  // the download's size cap (result_rejected above it)
  ExtractLimits limits;
  bool keep_archive = true;
  std::function<void(std::uint64_t done, std::uint64_t total)> progress;
};

struct HarvestReport {
  nlohmann::json result;    // the job's result record
  nlohmann::json manifest;
  std::string archive_path; // empty when not kept
  std::uint64_t archive_size = 0;
  std::uint64_t resumed_from = 0;
  ExtractReport extracted;
};

// Errors: busy (the job is not finished), result_rejected (above max_bytes;
// the agent keeps its copy), input_changed (a hash mismatch), the
// extractor's refusals, or the agent's.
Result<HarvestReport> harvest_job(rpc::Client& client, const HarvestOptions& options);

}  // namespace gpubox::harvest
