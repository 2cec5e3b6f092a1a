// `gpubox budget log [--follow] [--json]`: the budget journal as one readable
// line per entry, every string from outside (sandbox names, errors, tags,
// what a torn line held) escaped so that no control character reaches the
// terminal; a line that cannot be read is shown as such, never skipped.
// Read-only: it takes no lock a writer waits on. One thread.
#pragma once

#include <string>

#include "host/budget/journal.h"

namespace gpubox::host::cli {

// The line `budget log` prints for an entry (no newline).
std::string budget_log_line(const budget::JournalEntry& entry);

// Prints the journal (JSON lines with json); with follow, goes on printing what is appended until interrupted.
int print_budget_log(bool json, bool follow);

}  // namespace gpubox::host::cli
