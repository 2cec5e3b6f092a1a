// BudgetBook: the operations on the budgets of one store, each one locked
// read-fold-check-append-fsync on the journal (journal.h), the lock dropped
// as it returns: define and change
// a budget, reserve before a dispatch (refused past a ceiling, with nothing
// written), confirm, record an uncertain failure, release, settle. Named
// budgets; one may be the default, used when an operation names none. One
// object per thread; any number of processes at once.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "host/budget/journal.h"
#include "host/budget/ledger.h"
#include "host/budget/prices.h"
#include "base/status.h"

namespace gpubox::host::budget {

// The error code a refusal carries in the CLI's JSON and the Python and MCP errors.
inline constexpr char kBudgetExceeded[] = "budget_exceeded";

// What an operation asks a budget to hold, before it is dispatched.
struct Ask {
  std::string budget;          // as the user named it ("" : the default budget, if one is set)
  std::string budget_flag = "--budget";  // how the user named it, for errors
  std::string kind;            // create, restore, job, pull
  std::string backend;
  std::string sandbox;         // gpubox id (job, pull)
  std::string name;            // the sandbox's name
  std::string app;             // where the control plane groups it (create)
  bool priced = false;         // charged in money at the budget's prices (Backend::priced); else GPU-hours at price 0
  std::string gpu_type;        // as --gpu named it
  double gpu_count = 0;
  std::optional<double> cpus;        // nullopt: not given (the prices' default_cpu_cores)
  std::optional<double> memory_gib;  // nullopt: not given (the prices' default_memory_gib)
  double seconds = 0;          // how long it may run
  double egress_gib = 0;
  bool create = false;         // charge the per-create price
};

// A lock (flock) on STORE/budget/inflight-ID held while the operation a reservation guards is in
// flight: reconcile leaves alone the reservations whose lock another process holds, and the kernel
// drops it when that process dies. Move-only; the file is removed when done.
class InFlight {
 public:
  InFlight() = default;
  ~InFlight() { done(); }
  InFlight(InFlight&& other) noexcept : fd_(other.fd_), path_(std::move(other.path_)) { other.fd_ = -1; }
  InFlight& operator=(InFlight&&) = delete;
  InFlight(const InFlight&) = delete;
  InFlight& operator=(const InFlight&) = delete;
  // Takes the lock for reservation `id` under the journal's directory.
  static Result<InFlight> hold(const std::string& budget_dir, const std::string& id);
  // True when another process holds it now.
  static bool held_elsewhere(const std::string& budget_dir, const std::string& id);
  void done();

 private:
  int fd_ = -1;
  std::string path_;
};

// A reservation made: written and fsynced, its operation in flight until in_flight->done().
struct Reserved {
  std::string id;
  std::string budget;
  std::int64_t micro_usd = 0;
  std::int64_t micro_gpu_h = 0;
  std::shared_ptr<InFlight> in_flight;
};

// What a ceiling refusal says, and the numbers in it.
struct Refusal {
  std::string budget;
  std::int64_t total_micro = 0, asked_micro = 0, left_micro = 0;  // of the ceiling that refused
  bool in_gpu_hours = false;
};

class BudgetBook {
 public:
  explicit BudgetBook(std::string store_root) : journal_(std::move(store_root)) {}

  const std::string& journal_path() const { return journal_.path(); }
  std::string dir() const { return journal_.path().substr(0, journal_.path().rfind('/')); }

  // init (is_new) or set a budget; fields left nullopt keep their value. invalid_request naming the
  // flag: a budget that exists (init) or does not (set), a ceiling below what is reserved and settled.
  Status define(const std::string& name, std::optional<double> max_usd, std::optional<double> max_gpu_hours,
                std::optional<Prices> prices, bool make_default, bool is_new);
  // The default budget ("none": no default).
  Status set_default(const std::string& name);

  // Prices and checks the ask, and holds it: nullopt when the ask names no budget and no default is
  // set; invalid_request naming the flag for bad input (an unknown budget, a GPU type without a price);
  // resource_exhausted "budget_exceeded: ..." (and *refusal) past a ceiling, nothing written.
  Result<std::optional<Reserved>> reserve(const Ask& ask, Refusal* refusal = nullptr);
  // The reservation's operation was dispatched and answered (create: sandbox is its gpubox id).
  Status confirm(const std::string& reservation, const std::string& sandbox, const std::string& remote_id);
  // The dispatch failed with its outcome uncertain: the reservation stays held (reconcile settles it).
  Status mark_failed(const std::string& reservation, const std::string& why);
  // Nothing was dispatched, or what was is certainly gone without cost: all of it returns.
  Status release(const std::string& reservation, const std::string& why);
  // Settles every open reservation of a sandbox that ended for certain. measured_seconds: how long it
  // ran (sys.usage); nullopt: unknown, then the time since its first reservation bounds it. Each
  // reservation is charged at its own rate for its share of the time, at most what it holds.
  Status settle_sandbox(const std::string& sandbox, std::optional<double> measured_seconds, const std::string& how);
  // Settles one reservation for at most `seconds` of its time (reconcile).
  Status settle_reservation(const std::string& reservation, double seconds, const std::string& how);

  // The journal, under the shared lock.
  Result<JournalContents> read() const { return journal_.read(); }

 private:
  Journal journal_;
};

// The cost of running at a reservation's rate for seconds (its per-create part included), at most what it holds.
std::int64_t cost_micro_usd(const JournalEntry& reserved, double seconds);
std::int64_t cost_micro_gpu_h(const JournalEntry& reserved, double seconds);

}  // namespace gpubox::host::budget
