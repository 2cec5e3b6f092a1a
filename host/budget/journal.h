// The budget journal: STORE/budget/journal.jsonl, one JSON object a line,
// append-only. Every change to a budget (its definition, a reservation, a
// confirmation, a settlement, a release) is one line, written and fsynced
// before the operation it guards is dispatched. Writers serialise on an
// open-file-description fcntl lock of the whole journal (F_OFD_SETLKW), so
// two CLIs or two threads cannot both pass a ceiling; readers take the shared
// lock. A last line without its newline is torn (a writer died in write()):
// the next writer seals it (a newline and a `torn` line saying so) and every
// reader reports it; nothing is dropped. A Journal object belongs to one thread.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/status.h"

namespace gpubox::host::budget {

// Wall-clock time, in seconds since the epoch (a journal entry's time).
double now_seconds();

// One line of the journal. Which fields an op uses is said beside them.
struct JournalEntry {
  std::string op;          // define, default, reserve, confirm, failed, settle, release, torn
  double time = 0;         // seconds since the epoch, when it was written
  std::string budget;      // define, default, reserve
  // define: the ceilings (-1: none) and the prices as JSON (null: none).
  std::int64_t max_micro_usd = -1;
  std::int64_t max_micro_gpu_h = -1;
  nlohmann::json prices;
  bool make_default = false;   // define: this budget becomes the default
  std::string reservation;     // reserve, confirm, failed, settle, release
  // reserve: the amount held; settle: the amount spent.
  std::int64_t micro_usd = 0;
  std::int64_t micro_gpu_h = 0;
  // reserve: what it is for.
  std::string kind;            // create, restore, job, pull
  std::string backend;
  std::string sandbox;         // gpubox id: reserve (job, pull), confirm
  std::string name;            // reserve: the sandbox's name (from the user: escaped when shown)
  std::string app;             // reserve: the control plane's app (reconcile lists it)
  double usd_per_hour = 0;     // reserve: the rate it was priced at (settle measures with it)
  double gpu_count = 0;        // reserve
  double seconds = 0;          // reserve: the time held for
  double create_usd = 0;       // reserve: the per-create part, charged whatever the time
  std::string remote_id;       // confirm: the control plane's id of the sandbox (Backend::remote_id)
  std::string text;            // failed, release, settle: why or how; torn: what the torn line held
  std::int64_t line = 0;       // torn: the line number that was torn

  nlohmann::json to_json() const;
};

// One line (without its newline) as an entry; invalid_request saying what is wrong.
Result<JournalEntry> parse_journal_line(const std::string& line);

// A line that could not be read.
struct JournalProblem {
  std::int64_t line = 0;
  std::string what;       // "torn: ..." or "unreadable: ..."
};

struct JournalContents {
  std::vector<JournalEntry> entries;
  std::vector<JournalProblem> problems;
  std::int64_t lines = 0;
};

// Splits journal text into entries and problems; a last line without its
// newline is a problem ("torn") unless allow_partial_tail (a reader following
// a writer mid-line), then it is left out and *consumed stops before it.
JournalContents parse_journal(const std::string& text, bool allow_partial_tail = false, std::size_t* consumed = nullptr);

class Journal {
 public:
  // The journal under a store's root; its directory is created (0700) on the first write.
  explicit Journal(std::string store_root);
  ~Journal();
  Journal(const Journal&) = delete;
  Journal& operator=(const Journal&) = delete;

  const std::string& path() const { return path_; }

  // Takes the exclusive lock (waiting for it), seals a torn last line, and
  // reads everything. Until unlock() (or destruction) only this object writes.
  Result<JournalContents> lock_and_read();
  // REQUIRES: lock_and_read() succeeded. Appends the entries and fsyncs them.
  Status append(const std::vector<JournalEntry>& entries);
  void unlock();

  // Everything, under the shared lock; an absent journal is empty.
  Result<JournalContents> read() const;

 private:
  Status open_for_writing();
  std::string dir_;
  std::string path_;
  int fd_ = -1;        // open and locked between lock_and_read and unlock
  std::int64_t lines_ = 0;
};

}  // namespace gpubox::host::budget
