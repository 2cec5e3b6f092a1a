// Where budgets meet sandboxes, for every backend alike: the reservation a
// create makes before its backend is called, the one a job or a model pull
// makes when it may outlive what its sandbox holds, and the settlement when a
// sandbox ends (called by host/sandboxes/, which knows the sandbox's state). One thread; blocks on the
// journal's lock and, to measure a sandbox, on its agent.
#pragma once

#include <optional>
#include <string>

#include "host/backends/backend.h"
#include "host/budget/book.h"
#include "host/sandbox_store.h"

namespace gpubox::host::budget {

// The budget a sandbox's record names, as public_spec["budget"] keeps it: {name, reservation,
// priced, gpu_type, gpu_count, cpus, memory_gib, app}; {} when none.
nlohmann::json record_budget(const SandboxRecord& record);

// Holds a create's cost (price x requested resources x the sandbox's timeout, and the per-create
// price) before backend.create. budget: --budget as given ("" : the default). nullopt: not budgeted.
// A budgeted sandbox needs a timeout (invalid_request naming --timeout). *spec_entry: what the record keeps.
Result<std::optional<Reserved>> reserve_for_create(const SandboxStore& store, const Backend& backend,
                                                   const CreateRequest& request, const std::string& budget, bool restore,
                                                   nlohmann::json* spec_entry, Refusal* refusal = nullptr);

// After backend.create: confirmed when it made the sandbox; when it failed, released if the failure
// is certain (a backend on this host, or a request refused before dispatch), else kept and marked
// failed for `gpubox budget reconcile`. Returns what to add to the create's error ("" : nothing).
std::string finish_create(const SandboxStore& store, const Backend& backend, const Reserved& reserved,
                          const Result<SandboxRecord>& created);

// Holds what a job (kind "job") or a model pull ("pull") adds: the sandbox's rate for the part of
// job_timeout_s past what the sandbox already holds (0: the job ends with its sandbox), and egress.
// budget: --budget as given ("" : the sandbox's, else the default). nullopt: nothing to hold.
Result<std::optional<Reserved>> reserve_for_job(const SandboxStore& store, const SandboxRecord& record, const std::string& budget,
                                                const std::string& kind, double job_timeout_s, double egress_gib,
                                                Refusal* refusal = nullptr);

// REQUIRES: the sandbox runs. How long it has run under a budget (its agent's sys.usage
// container_s); nullopt when it holds no reservation or cannot say.
std::optional<double> sandbox_seconds_if_budgeted(const SandboxStore& store, const SandboxRecord& record);
// Settles a sandbox's open reservations once its end is certain (see BudgetBook::settle_sandbox).
Status settle_ended_sandbox(const SandboxStore& store, const SandboxRecord& record, std::optional<double> ran_for,
                            const std::string& how);

}  // namespace gpubox::host::budget
