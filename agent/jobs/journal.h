// Journal: STATE_DIR/events.jsonl, one JSON object per line, append-only and
// fsynced after each line, so every job state transition survives a crash or
// a restart of the agent in place. Thread-safe.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/fd.h"
#include "base/status.h"
#include "base/thread_annotations.h"

namespace gpubox::jobs {

class Journal {
 public:
  // Opens (creating, mode 0600) the journal for appending.
  static Result<std::unique_ptr<Journal>> open(const std::string& path);
  Journal(const Journal&) = delete;
  Journal& operator=(const Journal&) = delete;

  // Adds "ts" (UTC, ISO 8601 with microseconds) to event, appends it as one
  // line and fsyncs. The line is written with one write(2), so a crash leaves
  // at most a torn last line, which read_journal skips.
  // With sync false the line is written but not yet fsynced: the caller
  // calls sync() before it acknowledges anything that depends on it.
  Status append(nlohmann::json event, bool sync = true);
  Status sync();
  const std::string& path() const { return path_; }

 private:
  Journal(std::string path, Fd fd) : path_(std::move(path)), fd_(std::move(fd)) {}
  std::string path_;
  Mutex mutex_;
  Fd fd_ GUARDED_BY(mutex_);
};

// Every well-formed event of a journal, in order; *skipped counts lines that
// are not a JSON object (a torn last line after a crash). A missing file is empty.
std::vector<nlohmann::json> read_journal(const std::string& path, int* skipped = nullptr);

}  // namespace gpubox::jobs
