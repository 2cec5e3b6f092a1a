#include "host/budget/ledger.h"

#include <cstdio>

#include "host/budget/amounts.h"

namespace gpubox::host::budget {

std::int64_t BudgetState::left(std::int64_t max, std::int64_t reserved, std::int64_t settled) {
  return max < 0 ? -1 : saturating_sub(max, saturating_add(reserved, settled));
}

std::int64_t BudgetState::committed_micro_usd() const { return saturating_add(reserved_micro_usd, settled_micro_usd); }

std::int64_t BudgetState::committed_micro_gpu_h() const { return saturating_add(reserved_micro_gpu_h, settled_micro_gpu_h); }

Ledger Ledger::fold(const std::vector<JournalEntry>& entries) {
  Ledger ledger;
  for (const auto& entry : entries) ledger.apply(entry);
  return ledger;
}

const BudgetState* Ledger::budget(const std::string& name) const {
  auto it = budgets_.find(name);
  return it == budgets_.end() ? nullptr : &it->second;
}

const Reservation* Ledger::reservation(const std::string& id) const {
  auto it = index_.find(id);
  return it == index_.end() ? nullptr : &reservations_[it->second];
}

Reservation* Ledger::find(const std::string& id) {
  auto it = index_.find(id);
  return it == index_.end() ? nullptr : &reservations_[it->second];
}

std::vector<const Reservation*> Ledger::open_for_sandbox(const std::string& sandbox) const {
  std::vector<const Reservation*> found;
  for (const auto& reservation : reservations_) {
    if (reservation.state == "open" && !sandbox.empty() && reservation.sandbox == sandbox) found.push_back(&reservation);
  }
  return found;
}

void Ledger::add(std::int64_t& sum, std::int64_t amount, const std::string& what) {
  if (auto total = checked_add(sum, amount)) {
    sum = *total;
    return;
  }
  // Held at the bound: a budget whose sum overflowed reads as full and admits nothing more.
  sum = saturating_add(sum, amount);
  inconsistencies_.push_back(what + ": its amount overflows its budget's sum (held at the bound; the budget admits nothing more)");
}

void Ledger::apply(const JournalEntry& entry) {
  if (entry.op == "define") {
    BudgetState& state = budgets_[entry.budget];
    if (state.name.empty()) state.defined_at = entry.time;
    state.name = entry.budget;
    state.max_micro_usd = entry.max_micro_usd;
    state.max_micro_gpu_h = entry.max_micro_gpu_h;
    if (entry.prices.is_object()) {
      auto prices = Prices::from_json(entry.prices);
      if (prices) {
        state.prices = *prices;
      } else {
        inconsistencies_.push_back("budget " + entry.budget + ": " + prices.status().message());
      }
    }
    if (entry.make_default) default_ = entry.budget;
    return;
  }
  if (entry.op == "default") {
    default_ = entry.budget == "none" ? "" : entry.budget;
    return;
  }
  if (entry.op == "torn") return;
  if (entry.op == "reserve") {
    auto state = budgets_.find(entry.budget);
    if (state == budgets_.end() || index_.count(entry.reservation)) {
      inconsistencies_.push_back("reservation " + entry.reservation + ": of an unknown budget, or made twice");
      return;
    }
    Reservation reservation;
    reservation.reserved = entry;
    reservation.sandbox = entry.sandbox;
    add(state->second.reserved_micro_usd, entry.micro_usd, "reservation " + entry.reservation);
    add(state->second.reserved_micro_gpu_h, entry.micro_gpu_h, "reservation " + entry.reservation);
    index_[entry.reservation] = reservations_.size();
    reservations_.push_back(std::move(reservation));
    return;
  }
  Reservation* reservation = find(entry.reservation);
  if (!reservation) {
    inconsistencies_.push_back(entry.op + " of an unknown reservation " + entry.reservation);
    return;
  }
  if (entry.op == "confirm") {
    reservation->confirmed = true;
    if (!entry.sandbox.empty()) reservation->sandbox = entry.sandbox;
    if (!entry.remote_id.empty()) reservation->remote_id = entry.remote_id;
    return;
  }
  if (entry.op == "failed") {
    reservation->failure = entry.text;
    reservation->failed_at = entry.time;
    return;
  }
  if (reservation->state != "open") {
    inconsistencies_.push_back(entry.op + " of reservation " + entry.reservation + ", already " + reservation->state);
    return;
  }
  BudgetState& state = budgets_[reservation->reserved.budget];
  state.reserved_micro_usd = saturating_sub(state.reserved_micro_usd, reservation->reserved.micro_usd);
  state.reserved_micro_gpu_h = saturating_sub(state.reserved_micro_gpu_h, reservation->reserved.micro_gpu_h);
  if (entry.op == "settle") {
    reservation->state = "settled";
    reservation->settled_micro_usd = entry.micro_usd;
    reservation->settled_micro_gpu_h = entry.micro_gpu_h;
    add(state.settled_micro_usd, entry.micro_usd, "settlement of " + entry.reservation);
    add(state.settled_micro_gpu_h, entry.micro_gpu_h, "settlement of " + entry.reservation);
  } else {  // release
    reservation->state = "released";
  }
}

std::string usd_text(std::int64_t micro_usd) {
  bool negative = micro_usd < 0;
  // The magnitude in unsigned arithmetic: -INT64_MIN has no int64.
  unsigned long long value = negative ? 0ULL - static_cast<unsigned long long>(micro_usd) : static_cast<unsigned long long>(micro_usd);
  char text[48];
  std::snprintf(text, sizeof text, "%s$%llu.%06llu", negative ? "-" : "", value / 1000000, value % 1000000);
  std::string out = text;
  while (out.size() > out.find('.') + 3 && out.back() == '0') out.pop_back();
  return out;
}

std::string gpu_hours_text(std::int64_t micro_gpu_h) {
  char text[48];
  std::snprintf(text, sizeof text, "%.6f", static_cast<double>(micro_gpu_h) / 1e6);
  std::string out = text;
  while (out.size() > out.find('.') + 3 && out.back() == '0') out.pop_back();
  return out;
}

}  // namespace gpubox::host::budget
