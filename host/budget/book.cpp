#include "host/budget/book.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <ctime>

#include "host/budget/amounts.h"

namespace gpubox::host::budget {
namespace {

Status bad(const std::string& message) { return Status(ErrorCode::invalid_request, message); }


std::string new_reservation_id() {
  unsigned char bytes[8] = {};
  if (::getrandom(bytes, sizeof bytes, 0) != static_cast<ssize_t>(sizeof bytes)) {
    auto now = static_cast<unsigned long long>(now_seconds() * 1e9);
    for (auto& byte : bytes) byte = static_cast<unsigned char>(now >>= 8);
  }
  static const char kHex[] = "0123456789abcdef";
  std::string id = "r-";
  for (unsigned char byte : bytes) {
    id += kHex[byte >> 4];
    id += kHex[byte & 15];
  }
  return id;
}

bool valid_budget_name(const std::string& name) {
  if (name.empty() || name.size() > 63 || name == "none" || !std::isalnum(static_cast<unsigned char>(name[0]))) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-';
  });
}

std::string number_text(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", value);
  return text;
}

// The entry a change appends, or an error; called with the journal locked.
Result<JournalEntry> priced_reserve(const Ledger& ledger, const BudgetState& state, const Ask& ask) {
  JournalEntry entry;
  entry.op = "reserve";
  entry.budget = state.name;
  entry.kind = ask.kind;
  entry.backend = ask.backend;
  entry.sandbox = ask.sandbox;
  entry.name = ask.name;
  entry.app = ask.app;
  entry.gpu_count = ask.gpu_count;
  entry.seconds = ask.seconds;
  (void)ledger;
  double per_hour = 0;
  if (ask.priced) {
    if (!state.prices) {
      return bad(ask.budget_flag + " " + state.name + ": the budget has no prices (gpubox budget set " + state.name +
                 " --prices FILE; docs/budget.md)");
    }
    const Prices& prices = *state.prices;
    if (ask.gpu_count > 0) {
      auto it = prices.gpu_hour.find(ask.gpu_type);
      if (it == prices.gpu_hour.end()) {
        return bad("--gpu " + ask.gpu_type + ": budget " + state.name + "'s prices have no gpu_hour." + ask.gpu_type +
                   " (add it to the prices file and run gpubox budget set " + state.name + " --prices FILE)");
      }
      per_hour += ask.gpu_count * it->second;
    }
    std::optional<double> cpus = ask.cpus ? ask.cpus : prices.default_cpu_cores;
    if (!cpus && prices.cpu_core_hour > 0) {
      return bad("--cpu: budget " + state.name + " prices CPU cores: give --cpu (or default_cpu_cores in its prices file)");
    }
    std::optional<double> memory = ask.memory_gib ? ask.memory_gib : prices.default_memory_gib;
    if (!memory && prices.memory_gib_hour > 0) {
      return bad("--memory: budget " + state.name + " prices memory: give --memory (or default_memory_gib in its prices file)");
    }
    per_hour += cpus.value_or(0) * prices.cpu_core_hour + memory.value_or(0) * prices.memory_gib_hour;
    entry.create_usd = (ask.create ? prices.create : 0) + ask.egress_gib * prices.egress_gib;
  }
  entry.usd_per_hour = per_hour;
  double usd = per_hour * ask.seconds / 3600.0 + entry.create_usd;
  double gpu_hours = ask.gpu_count * ask.seconds / 3600.0;
  auto micro_usd = micro_of(usd);
  auto micro_gpu_h = micro_of(gpu_hours);
  if (!micro_usd || !micro_gpu_h) {
    if (!std::isfinite(usd) || usd < 0 || !std::isfinite(gpu_hours) || gpu_hours < 0) {
      return bad(ask.kind + ": its reservation is not a number >= 0 (" + number_text(usd) + " USD, " + number_text(gpu_hours) +
                 " GPU-hours): check --gpu, --cpu, --memory and --timeout");
    }
    // Beyond what any ceiling holds: refused as past the ceiling, nothing written.
    return Status(ErrorCode::resource_exhausted,
                  std::string(kBudgetExceeded) + ": budget " + state.name + " cannot hold this " + ask.kind + "'s reservation of $" +
                      number_text(usd) + " and " + number_text(gpu_hours) + " GPU-hours: beyond the largest amount a budget holds (" +
                      usd_text(kMaxMicro) + "); nothing was dispatched");
  }
  entry.micro_usd = *micro_usd;
  entry.micro_gpu_h = *micro_gpu_h;
  return entry;
}

// Drops the journal's lock when an operation returns, whichever way.
class Unlocks {
 public:
  explicit Unlocks(Journal& journal) : journal_(journal) {}
  ~Unlocks() { journal_.unlock(); }
  Unlocks(const Unlocks&) = delete;
  Unlocks& operator=(const Unlocks&) = delete;

 private:
  Journal& journal_;
};

}  // namespace

Result<InFlight> InFlight::hold(const std::string& budget_dir, const std::string& id) {
  InFlight held;
  held.path_ = budget_dir + "/inflight-" + id;
  held.fd_ = ::open(held.path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (held.fd_ < 0) return Status::from_errno(errno, "cannot create '" + held.path_ + "'");
  if (::flock(held.fd_, LOCK_EX) != 0) return Status::from_errno(errno, "cannot lock '" + held.path_ + "'");
  return held;
}

bool InFlight::held_elsewhere(const std::string& budget_dir, const std::string& id) {
  int fd = ::open((budget_dir + "/inflight-" + id).c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return false;
  bool held = ::flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK;
  ::close(fd);
  return held;
}

void InFlight::done() {
  if (fd_ < 0) return;
  ::unlink(path_.c_str());
  ::close(fd_);
  fd_ = -1;
}

std::int64_t cost_micro_usd(const JournalEntry& reserved, double seconds) {
  double used = std::clamp(seconds, 0.0, reserved.seconds);
  return std::min(reserved.micro_usd, micro_of(reserved.usd_per_hour * used / 3600.0 + reserved.create_usd).value_or(reserved.micro_usd));
}

std::int64_t cost_micro_gpu_h(const JournalEntry& reserved, double seconds) {
  double used = std::clamp(seconds, 0.0, reserved.seconds);
  return std::min(reserved.micro_gpu_h, micro_of(reserved.gpu_count * used / 3600.0).value_or(reserved.micro_gpu_h));
}

Status BudgetBook::define(const std::string& name, std::optional<double> max_usd, std::optional<double> max_gpu_hours,
                          std::optional<Prices> prices, bool make_default, bool is_new) {
  if (!valid_budget_name(name)) {
    return bad("NAME '" + name + "': expected 1-63 of A-Z a-z 0-9 _ . - starting with a letter or digit (not 'none')");
  }
  for (std::optional<double> value : {max_usd, max_gpu_hours}) {
    if (value && !micro_of(*value)) return bad("--max-usd/--max-gpu-hours: expected a number from 0 to 1e12");
  }
  Unlocks unlocks(journal_);
  auto contents = journal_.lock_and_read();
  if (!contents) return contents.status();
  Ledger ledger = Ledger::fold(contents->entries);
  const BudgetState* existing = ledger.budget(name);
  if (is_new && existing) return bad("budget " + name + " exists already (gpubox budget set " + name + " changes it)");
  if (!is_new && !existing) return bad("NAME " + name + ": no such budget (gpubox budget lists them; init makes one)");
  JournalEntry entry;
  entry.op = "define";
  entry.budget = name;
  entry.make_default = make_default || ledger.budgets().empty();
  entry.max_micro_usd = max_usd ? *micro_of(*max_usd) : existing ? existing->max_micro_usd : -1;
  entry.max_micro_gpu_h = max_gpu_hours ? *micro_of(*max_gpu_hours) : existing ? existing->max_micro_gpu_h : -1;
  if (entry.max_micro_usd < 0 && entry.max_micro_gpu_h < 0) return bad("--max-usd or --max-gpu-hours: a budget needs a ceiling");
  if (prices) {
    // Bounded as a prices file is (prices.h): no price makes a reservation's arithmetic overflow.
    if (auto checked = Prices::from_json(prices->to_json()); !checked) return bad("--prices: " + checked.status().message());
    entry.prices = prices->to_json();
  } else if (existing && existing->prices) {
    entry.prices = existing->prices->to_json();
  }
  if (existing) {
    std::int64_t committed = existing->committed_micro_usd();
    if (max_usd && entry.max_micro_usd < committed) {
      return bad("--max-usd " + number_text(*max_usd) + ": below what budget " + name + " has reserved and settled already (" +
                 usd_text(committed) + ")");
    }
    std::int64_t committed_gpu = existing->committed_micro_gpu_h();
    if (max_gpu_hours && entry.max_micro_gpu_h < committed_gpu) {
      return bad("--max-gpu-hours " + number_text(*max_gpu_hours) + ": below what budget " + name +
                 " has reserved and settled already (" + gpu_hours_text(committed_gpu) + " GPU-hours)");
    }
  }
  return journal_.append({entry});
}

Status BudgetBook::set_default(const std::string& name) {
  Unlocks unlocks(journal_);
  auto contents = journal_.lock_and_read();
  if (!contents) return contents.status();
  Ledger ledger = Ledger::fold(contents->entries);
  if (name != "none" && !ledger.budget(name)) return bad("NAME " + name + ": no such budget (gpubox budget lists them)");
  JournalEntry entry;
  entry.op = "default";
  entry.budget = name;
  return journal_.append({entry});
}

Result<std::optional<Reserved>> BudgetBook::reserve(const Ask& ask, Refusal* refusal) {
  if (ask.budget == "none") return std::optional<Reserved>();
  // Nothing to read or lock when the store has no budget at all.
  if (ask.budget.empty() && ::access(journal_.path().c_str(), F_OK) != 0) return std::optional<Reserved>();
  Unlocks unlocks(journal_);
  auto contents = journal_.lock_and_read();
  if (!contents) return contents.status();
  Ledger ledger = Ledger::fold(contents->entries);
  std::string name = ask.budget.empty() ? ledger.default_budget() : ask.budget;
  if (name.empty()) return std::optional<Reserved>();
  const BudgetState* state = ledger.budget(name);
  if (!state) {
    return bad(ask.budget_flag + " " + name + ": no such budget (gpubox budget lists them; gpubox budget init " + name +
               " makes it)");
  }
  auto entry = priced_reserve(ledger, *state, ask);
  if (!entry) return entry.status();
  entry->reservation = new_reservation_id();
  auto refuse = [&](bool gpu, std::int64_t max, std::int64_t committed, std::int64_t asked) -> Status {
    std::int64_t left = saturating_sub(max, committed);
    if (refusal) *refusal = {name, max, asked, left, gpu};
    auto text = [gpu](std::int64_t value) { return gpu ? gpu_hours_text(value) + " GPU-hours" : usd_text(value); };
    return Status(ErrorCode::resource_exhausted,
                  std::string(kBudgetExceeded) + ": budget " + name + " (ceiling " + text(max) + ") cannot hold this " + ask.kind +
                      "'s reservation of " + text(asked) + ": " + text(committed) + " is reserved or settled, " +
                      text(std::max<std::int64_t>(left, 0)) + " remains; nothing was dispatched (gpubox budget shows it)");
  };
  // Checked sums: one that would overflow is past any ceiling.
  auto past = [](std::int64_t max, std::int64_t committed, std::int64_t asked) {
    auto total = checked_add(committed, asked);
    return max >= 0 && (!total || *total > max);
  };
  if (past(state->max_micro_usd, state->committed_micro_usd(), entry->micro_usd)) {
    return refuse(false, state->max_micro_usd, state->committed_micro_usd(), entry->micro_usd);
  }
  if (past(state->max_micro_gpu_h, state->committed_micro_gpu_h(), entry->micro_gpu_h)) {
    return refuse(true, state->max_micro_gpu_h, state->committed_micro_gpu_h(), entry->micro_gpu_h);
  }
  // In flight before it is written: reconcile never settles an operation that is still going on.
  auto in_flight = InFlight::hold(dir(), entry->reservation);
  if (!in_flight) return in_flight.status();
  if (Status written = journal_.append({*entry}); !written) return written;
  return std::optional<Reserved>(Reserved{entry->reservation, name, entry->micro_usd, entry->micro_gpu_h,
                                          std::make_shared<InFlight>(std::move(*in_flight))});
}

Status BudgetBook::confirm(const std::string& reservation, const std::string& sandbox, const std::string& remote_id) {
  Unlocks unlocks(journal_);
  if (auto locked = journal_.lock_and_read(); !locked) return locked.status();
  JournalEntry entry;
  entry.op = "confirm";
  entry.reservation = reservation;
  entry.sandbox = sandbox;
  entry.remote_id = remote_id;
  return journal_.append({entry});
}

Status BudgetBook::mark_failed(const std::string& reservation, const std::string& why) {
  Unlocks unlocks(journal_);
  if (auto locked = journal_.lock_and_read(); !locked) return locked.status();
  JournalEntry entry;
  entry.op = "failed";
  entry.reservation = reservation;
  entry.text = why;
  return journal_.append({entry});
}

Status BudgetBook::release(const std::string& reservation, const std::string& why) {
  Unlocks unlocks(journal_);
  auto contents = journal_.lock_and_read();
  if (!contents) return contents.status();
  Ledger ledger = Ledger::fold(contents->entries);  // held points into it: it must outlive held
  const Reservation* held = ledger.reservation(reservation);
  if (!held || held->state != "open") return Status::ok();
  JournalEntry entry;
  entry.op = "release";
  entry.reservation = reservation;
  entry.text = why;
  return journal_.append({entry});
}

Status BudgetBook::settle_sandbox(const std::string& sandbox, std::optional<double> measured_seconds, const std::string& how) {
  Unlocks unlocks(journal_);
  auto contents = journal_.lock_and_read();
  if (!contents) return contents.status();
  Ledger ledger = Ledger::fold(contents->entries);
  auto open = ledger.open_for_sandbox(sandbox);
  if (open.empty()) return Status::ok();
  double seconds = measured_seconds ? *measured_seconds : now_seconds() - open.front()->reserved.time;
  std::string text = how + (measured_seconds ? " (measured " : " (bounded by the time since it was reserved: ") +
                     std::to_string(static_cast<long long>(std::ceil(seconds))) + " s)";
  std::vector<JournalEntry> entries;
  for (const Reservation* reservation : open) {
    // Each reservation holds its own stretch of the sandbox's time, in order.
    double share = std::min(std::max(seconds, 0.0), reservation->reserved.seconds);
    seconds -= share;
    JournalEntry entry;
    entry.op = "settle";
    entry.reservation = reservation->reserved.reservation;
    entry.micro_usd = cost_micro_usd(reservation->reserved, share);
    entry.micro_gpu_h = cost_micro_gpu_h(reservation->reserved, share);
    entry.text = text;
    entries.push_back(std::move(entry));
  }
  return journal_.append(entries);
}

Status BudgetBook::settle_reservation(const std::string& reservation, double seconds, const std::string& how) {
  Unlocks unlocks(journal_);
  auto contents = journal_.lock_and_read();
  if (!contents) return contents.status();
  Ledger ledger = Ledger::fold(contents->entries);  // held points into it: it must outlive held
  const Reservation* held = ledger.reservation(reservation);
  if (!held || held->state != "open") return Status::ok();
  JournalEntry entry;
  entry.op = "settle";
  entry.reservation = reservation;
  entry.micro_usd = cost_micro_usd(held->reserved, seconds);
  entry.micro_gpu_h = cost_micro_gpu_h(held->reserved, seconds);
  entry.text = how;
  return journal_.append({entry});
}

}  // namespace gpubox::host::budget
