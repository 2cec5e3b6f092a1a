// Stager: packs a finished job's out/ tree, stdout.log and stderr.log into
// one tar + zstd archive (libarchive) and describes it in a Manifest. Never
// fails silently: a file it cannot read, or a disk that fills, is named in
// the manifest's missing list. Reentrant; one call per thread at a time.
#pragma once

#include <string>
#include <vector>

#include "base/manifest.h"

namespace gpubox::jobs {

// What staging produced.
struct StagingSummary {
  bool archive_written = false;
  bool disk_full = false;
  std::vector<std::string> missing;  // "path: reason", for every file that is not in the archive
  std::vector<std::string> output_files;  // paths relative to out/
  std::string error;                 // why staging failed, when it did
};

struct StageRequest {
  std::string out_dir;       // the job's out/ (may be missing: nothing to archive)
  std::string stdout_log;
  std::string stderr_log;
  std::string archive_path;  // written here (replaced when present)
  int compression_level = 3;
  int compression_threads = 0;  // 0: one per CPU, at most 8
};

struct StageOutcome {
  Manifest manifest;        // archive_size and archive_sha256 set when summary.archive_written
  StagingSummary summary;
};

// Writes the archive. When the staging disk fills, retries with the two logs
// alone, and lists every file of out/ that is not in the archive as missing.
StageOutcome stage_outputs(const StageRequest& request);

}  // namespace gpubox::jobs
