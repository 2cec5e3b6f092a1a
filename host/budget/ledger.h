// Ledger: the state of every budget, folded from the journal's entries
// (journal.h): each budget's ceilings and prices, what is reserved and open,
// what is settled, the default, and every reservation with its state.
// Pure; any thread, one object per thread.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "host/budget/journal.h"
#include "host/budget/prices.h"

namespace gpubox::host::budget {

struct Reservation {
  JournalEntry reserved;     // its reserve line
  // open: held; settled: spent settled_micro_usd, the rest returned; released: all returned.
  std::string state = "open";
  bool confirmed = false;    // the operation was dispatched and answered (create: the sandbox runs)
  std::string failure;       // a dispatch that failed with its outcome uncertain (stays open)
  double failed_at = 0;      // when that failure was written
  std::string sandbox;       // gpubox id, once known
  std::string remote_id;     // the control plane's id, once known
  std::int64_t settled_micro_usd = 0;
  std::int64_t settled_micro_gpu_h = 0;
};

struct BudgetState {
  std::string name;
  std::int64_t max_micro_usd = -1;    // -1: no ceiling in money
  std::int64_t max_micro_gpu_h = -1;  // -1: no ceiling in GPU-hours
  std::optional<Prices> prices;
  double defined_at = 0;
  std::int64_t reserved_micro_usd = 0;   // held by open reservations
  std::int64_t reserved_micro_gpu_h = 0;
  std::int64_t settled_micro_usd = 0;    // spent, as settled
  std::int64_t settled_micro_gpu_h = 0;
  // The ceiling less what is committed (below 0: past it); -1 with no ceiling (check max_ first).
  std::int64_t left_micro_usd() const { return left(max_micro_usd, reserved_micro_usd, settled_micro_usd); }
  std::int64_t left_micro_gpu_h() const { return left(max_micro_gpu_h, reserved_micro_gpu_h, settled_micro_gpu_h); }
  // reserved + settled, held at INT64_MAX where the sum would overflow.
  std::int64_t committed_micro_usd() const;
  std::int64_t committed_micro_gpu_h() const;

 private:
  static std::int64_t left(std::int64_t max, std::int64_t reserved, std::int64_t settled);
};

class Ledger {
 public:
  static Ledger fold(const std::vector<JournalEntry>& entries);

  const std::map<std::string, BudgetState>& budgets() const { return budgets_; }
  const BudgetState* budget(const std::string& name) const;
  const std::string& default_budget() const { return default_; }
  // Every reservation, in the order made.
  const std::vector<Reservation>& reservations() const { return reservations_; }
  const Reservation* reservation(const std::string& id) const;
  // The open reservations of a sandbox (by gpubox id), oldest first.
  std::vector<const Reservation*> open_for_sandbox(const std::string& sandbox) const;
  // Lines that made no sense against what came before (a settle of an unknown reservation, an amount
// that overflows its budget's sum...).
  const std::vector<std::string>& inconsistencies() const { return inconsistencies_; }

 private:
  void apply(const JournalEntry& entry);
  // sum += amount, checked: an overflow holds sum at the bound and is an inconsistency naming what.
  void add(std::int64_t& sum, std::int64_t amount, const std::string& what);
  Reservation* find(const std::string& id);
  std::map<std::string, BudgetState> budgets_;
  std::string default_;
  std::vector<Reservation> reservations_;
  std::map<std::string, std::size_t> index_;
  std::vector<std::string> inconsistencies_;
};

// "$1.234567" -> "$1.23" style text of micro-dollars (at least 2 decimals, more when they are not 0).
std::string usd_text(std::int64_t micro_usd);
// GPU-hours from micro GPU-hours ("1.5").
std::string gpu_hours_text(std::int64_t micro_gpu_h);

}  // namespace gpubox::host::budget
