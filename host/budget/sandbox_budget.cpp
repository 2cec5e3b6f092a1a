#include "host/budget/sandbox_budget.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <ctime>

#include "host/backends/registry.h"
#include "host/sandbox_keys.h"
#include "rpc/client.h"

namespace gpubox::host::budget {
namespace {

bool has_journal(const SandboxStore& store) { return ::access(BudgetBook(store.root()).journal_path().c_str(), F_OK) == 0; }

// A record's resources, for a sandbox created with no budget: its limits, and the GPUs and group its
// backend says it has (none for a backend this build lacks).
Ask ask_from_spec(const SandboxRecord& record, const Backend* backend) {
  Ask ask;
  const auto& spec = record.spec;
  ask.backend = record.backend;
  ask.priced = backend && backend->priced();
  if (backend) {
    GpuAsk gpus = backend->gpus_recorded(record);
    ask.gpu_type = gpus.type;
    ask.gpu_count = gpus.count;
    ask.app = backend->group_recorded(record);
  }
  if (spec.value("cpu", 0.0) > 0) ask.cpus = spec.value("cpu", 0.0);
  if (spec.value("memory_mib", 0.0) > 0) ask.memory_gib = spec.value("memory_mib", 0.0) / 1024.0;
  return ask;
}

}  // namespace

nlohmann::json record_budget(const SandboxRecord& record) {
  auto it = record.spec.find("budget");
  return it != record.spec.end() && it->is_object() ? *it : nlohmann::json::object();
}

Result<std::optional<Reserved>> reserve_for_create(const SandboxStore& store, const Backend& backend,
                                                   const CreateRequest& request, const std::string& budget, bool restore,
                                                   nlohmann::json* spec_entry, Refusal* refusal) {
  BudgetBook book(store.root());
  Ask ask;
  ask.budget = budget;
  ask.kind = restore ? "restore" : "create";
  ask.backend = backend.name();
  ask.name = request.name;
  ask.app = backend.group_asked(request);
  ask.priced = backend.priced();
  GpuAsk gpus = backend.gpus_asked(request);
  ask.gpu_type = gpus.type;
  ask.gpu_count = gpus.count;
  if (request.limits.cpus > 0) ask.cpus = request.limits.cpus;
  if (request.limits.memory_mib > 0) ask.memory_gib = static_cast<double>(request.limits.memory_mib) / 1024.0;
  ask.seconds = backend.timeout_asked(request);
  ask.create = true;
  if (ask.seconds <= 0 && (!budget.empty() || has_journal(store))) {
    // Only an error when a budget applies.
    auto contents = book.read();
    if (!contents) return contents.status();
    Ledger ledger = Ledger::fold(contents->entries);
    std::string name = budget.empty() ? ledger.default_budget() : budget;
    if (!name.empty() && name != "none" && !ledger.budget(name)) {
      return Status(ErrorCode::invalid_request, "--budget " + name + ": no such budget (gpubox budget lists them; gpubox budget init " +
                                                    name + " makes it)");
    }
    if (!name.empty() && name != "none") {
      return Status(ErrorCode::invalid_request, "--timeout: a sandbox under budget " + name +
                                                    " needs one (its reservation is its rate x its timeout)");
    }
  }
  auto reserved = book.reserve(ask, refusal);
  if (!reserved || !*reserved) return reserved;
  *spec_entry = {{"name", (*reserved)->budget}, {"reservation", (*reserved)->id}, {"priced", ask.priced},
                 {"gpu_type", ask.gpu_type}, {"gpu_count", ask.gpu_count}, {"seconds", ask.seconds}, {"app", ask.app}};
  if (ask.cpus) (*spec_entry)["cpus"] = *ask.cpus;
  if (ask.memory_gib) (*spec_entry)["memory_gib"] = *ask.memory_gib;
  return reserved;
}

std::string finish_create(const SandboxStore& store, const Backend& backend, const Reserved& reserved,
                          const Result<SandboxRecord>& created) {
  BudgetBook book(store.root());
  // Its operation is over once what happened is written.
  struct Landed {
    const Reserved& reserved;
    ~Landed() {
      if (reserved.in_flight) reserved.in_flight->done();
    }
  } landed{reserved};
  if (created) {
    (void)book.confirm(reserved.id, created->id, backend.remote_id(created.value()));
    return "";
  }
  bool certain = !backend.state_is_remote() || created.status().code() == ErrorCode::invalid_request;
  if (certain) {
    (void)book.release(reserved.id, "create failed before anything ran: " + created.status().message());
    return "";
  }
  (void)book.mark_failed(reserved.id, created.status().message());
  return "; its reservation " + reserved.id + " (" + usd_text(reserved.micro_usd) + " of budget " + reserved.budget +
         ") stays held until `gpubox budget reconcile` finds out what ran; gpubox does not retry a create";
}

Result<std::optional<Reserved>> reserve_for_job(const SandboxStore& store, const SandboxRecord& record, const std::string& budget,
                                                const std::string& kind, double job_timeout_s, double egress_gib,
                                                Refusal* refusal) {
  nlohmann::json own = record_budget(record);
  std::string name = budget.empty() ? own.value("name", "") : budget;
  if (name.empty() && !has_journal(store)) return std::optional<Reserved>();
  BudgetBook book(store.root());
  auto contents = book.read();
  if (!contents) return contents.status();
  Ledger ledger = Ledger::fold(contents->entries);
  if (name.empty()) name = ledger.default_budget();
  if (name.empty() || name == "none") return std::optional<Reserved>();
  Ask ask = ask_from_spec(record, find_backend(record.backend));
  if (own.is_object()) {
    ask.priced = own.value("priced", ask.priced);
    ask.gpu_type = own.value("gpu_type", ask.gpu_type);
    ask.gpu_count = own.value("gpu_count", ask.gpu_count);
    if (own.contains("cpus")) ask.cpus = own.value("cpus", 0.0);
    if (own.contains("memory_gib")) ask.memory_gib = own.value("memory_gib", 0.0);
  }
  ask.budget = name;
  ask.kind = kind;
  ask.sandbox = record.id;
  ask.name = record.name;
  ask.egress_gib = egress_gib;
  // What the sandbox holds already runs until the latest end of its reservations.
  double held_until = now_seconds();
  for (const auto& reservation : ledger.reservations()) {
    if (reservation.sandbox == record.id && reservation.state == "open") {
      held_until = std::max(held_until, reservation.reserved.time + reservation.reserved.seconds);
    }
  }
  if (job_timeout_s <= 0) {
    double sandbox_timeout = record.spec.value("timeout_s", 0.0);
    if (sandbox_timeout <= 0 && egress_gib <= 0) {
      return Status(ErrorCode::invalid_request, "--timeout: a " + kind + " under budget " + name +
                                                    " in a sandbox with no timeout needs one (its reservation is the rate x the timeout)");
    }
  }
  ask.seconds = job_timeout_s > 0 ? std::max(0.0, now_seconds() + job_timeout_s - held_until) : 0;
  if (ask.seconds <= 0 && egress_gib <= 0) return std::optional<Reserved>();
  return book.reserve(ask, refusal);
}

std::optional<double> sandbox_seconds_if_budgeted(const SandboxStore& store, const SandboxRecord& record) {
  if (!has_journal(store)) return std::nullopt;
  auto contents = BudgetBook(store.root()).read();
  if (!contents) return std::nullopt;
  Ledger ledger = Ledger::fold(contents->entries);
  nlohmann::json own = record_budget(record);
  bool held = !ledger.open_for_sandbox(record.id).empty() ||
              (own.is_object() && ledger.reservation(own.value("reservation", "")) != nullptr);
  if (!held || record.endpoint.empty()) return std::nullopt;
  auto options = client_options_for(record);
  if (!options) return std::nullopt;
  options->connect_timeout = std::chrono::milliseconds(3'000);
  auto client = rpc::Client::connect(*options);
  if (!client) return std::nullopt;
  auto usage = (*client)->call("sys.usage", nlohmann::json::object());
  if (!usage || !usage->value("container_s", nlohmann::json()).is_number()) return std::nullopt;
  return (*usage)["container_s"].get<double>();
}

Status settle_ended_sandbox(const SandboxStore& store, const SandboxRecord& record, std::optional<double> ran_for,
                            const std::string& how) {
  if (!has_journal(store)) return Status::ok();
  BudgetBook book(store.root());
  // A create whose CLI stopped before it confirmed: link its reservation to the sandbox first.
  nlohmann::json own = record_budget(record);
  if (own.is_object() && !own.value("reservation", "").empty()) {
    auto contents = book.read();
    if (contents) {
      Ledger ledger = Ledger::fold(contents->entries);  // reservation points into it
      const Reservation* reservation = ledger.reservation(own.value("reservation", ""));
      if (reservation && reservation->state == "open" && reservation->sandbox.empty()) {
        const Backend* backend = find_backend(record.backend);
        (void)book.confirm(reservation->reserved.reservation, record.id, backend ? backend->remote_id(record) : "");
      }
    }
  }
  return book.settle_sandbox(record.id, ran_for, how);
}

}  // namespace gpubox::host::budget
