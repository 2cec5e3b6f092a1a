#include "host/sandboxes/reconcile.h"

#include <algorithm>
#include <ctime>
#include <map>

#include "host/backends/registry.h"
#include "host/budget/book.h"
#include "host/budget/sandbox_budget.h"
#include "host/sandboxes/state.h"

namespace gpubox::host {

using budget::BudgetBook;
using budget::InFlight;
using budget::Ledger;
using budget::Reservation;
using budget::record_budget;
using budget::settle_ended_sandbox;

namespace {

// The store's record a reservation belongs to: by its confirmed sandbox, or by the reservation its create kept.
SandboxRecord* record_of(std::vector<SandboxRecord>& records, const Reservation& reservation) {
  for (auto& record : records) {
    if (!reservation.sandbox.empty() && record.id == reservation.sandbox) return &record;
    if (record_budget(record).value("reservation", "") == reservation.reserved.reservation) return &record;
  }
  return nullptr;
}

}  // namespace

Result<nlohmann::json> reconcile_reservations(const SandboxStore& store) {
  BudgetBook book(store.root());
  auto contents = book.read();
  if (!contents) return contents.status();
  Ledger ledger = Ledger::fold(contents->entries);
  std::vector<SandboxRecord> records = store.list();
  nlohmann::json done = nlohmann::json::array();
  nlohmann::json errors = nlohmann::json::array();
  std::map<std::string, nlohmann::json> remote_by_app;  // (backend/app) -> list_remote's answer
  auto report = [&](const Reservation& r, const std::string& action, const std::string& detail) {
    done.push_back({{"reservation", r.reserved.reservation}, {"budget", r.reserved.budget}, {"kind", r.reserved.kind},
                    {"action", action}, {"detail", detail}});
  };
  for (const Reservation& reservation : ledger.reservations()) {
    if (reservation.state != "open") continue;
    if (InFlight::held_elsewhere(book.dir(), reservation.reserved.reservation)) {
      report(reservation, "in_flight", "its operation is still going on (another gpubox holds it)");
      continue;
    }
    const Backend* backend = find_backend(reservation.reserved.backend);
    SandboxRecord* record = record_of(records, reservation);
    if (record && backend && backend->state_is_remote()) (void)backend->refresh_states(store, {record});
    std::string state = record ? sandbox_state(*record) : "";
    if (state == "running") {
      if (reservation.sandbox.empty()) (void)book.confirm(reservation.reserved.reservation, record->id, backend ? backend->remote_id(*record) : "");
      report(reservation, "live", "sandbox " + record->id + " runs; `gpubox terminate " + record->id + "` ends and settles it");
      continue;
    }
    if (state == "dead") {
      if (Status settled = settle_ended_sandbox(store, *record, std::nullopt, "reconcile: its sandbox had ended"); !settled) {
        errors.push_back(settled.message());
        continue;
      }
      report(reservation, "settled", "sandbox " + record->id + " had ended (" + sandbox_end(*record).message + ")");
      continue;
    }
    // No record, or one its create never finished: ask the control plane by the reservation's tag.
    const ControlPlane* plane = backend ? backend->control_plane() : nullptr;
    if (plane && backend->state_is_remote()) {
      std::string key = backend->name() + "/" + reservation.reserved.app;
      if (!remote_by_app.count(key)) {
        auto listed = backend->list_remote(reservation.reserved.app.empty() ? "gpubox" : reservation.reserved.app);
        remote_by_app[key] = listed ? *listed : nlohmann::json{{"error", listed.status().message()}};
      }
      const nlohmann::json& listed = remote_by_app[key];
      if (listed.contains("error")) {
        errors.push_back(plane->name + " could not be asked about app " + reservation.reserved.app + ": " + listed["error"].get<std::string>());
        report(reservation, "left", plane->name + " could not be asked; the reservation stays held");
        continue;
      }
      std::string remote_id;  // of the sandbox that carries the reservation's tag, if one runs
      const nlohmann::json sandboxes = listed.value("sandboxes", nlohmann::json::array());
      for (const auto& sandbox : sandboxes) {
        if (sandbox.value("tags", nlohmann::json::object()).value(kReservationTag, "") == reservation.reserved.reservation) {
          remote_id = sandbox.value(plane->id_key, "");
        }
      }
      if (!remote_id.empty()) {
        if (record) {
          backend->link_remote_id(record, remote_id);
          (void)store.save(*record);
          (void)book.confirm(reservation.reserved.reservation, record->id, remote_id);
          report(reservation, "linked", "running on " + plane->name + " as " + remote_id + "; its record " + record->id +
                                            " now knows it: `gpubox terminate " + record->id + "` ends and settles it");
        } else {
          report(reservation, "live", "running on " + plane->name + " as " + remote_id + " with no record here; end it (" +
                                          plane->end_command + " " + remote_id + ") and reconcile again");
        }
        continue;
      }
    }
    // Nowhere: it ran at most from its reserve until its failure (or until now).
    double until = reservation.failed_at > 0 ? reservation.failed_at : budget::now_seconds();
    double seconds = std::max(0.0, until - reservation.reserved.time);
    if (Status settled = book.settle_reservation(reservation.reserved.reservation, seconds,
                                                 "reconcile: not running anywhere; charged for at most " +
                                                     std::to_string(static_cast<long long>(seconds)) + " s");
        !settled) {
      errors.push_back(settled.message());
      continue;
    }
    if (record && state == "creating") (void)store.remove(*record);  // its create never finished
    report(reservation, "settled", "not running; charged for at most " + std::to_string(static_cast<long long>(seconds)) +
                                       " s of its " + std::to_string(static_cast<long long>(reservation.reserved.seconds)) + " s");
  }
  return nlohmann::json{{"reservations", done}, {"errors", errors}};
}

}  // namespace gpubox::host
