// `gpubox budget`: shows the budgets of this store (ceiling, reserved,
// settled, left, each open reservation), and `init`, `set`, `default` and
// `reconcile` change them; `log` is in budget_log.cpp. Everything a budget
// does is a line of its journal (host/budget/journal.h, docs/budget.md).
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>

#include "base/terminal_text.h"
#include "host/budget/book.h"
#include "host/sandboxes/reconcile.h"
#include "host/cli/budget_log.h"
#include "host/cli/cli.h"

namespace gpubox::host::cli {
namespace {

using budget::usd_text;

constexpr char kUsage[] =
    "usage: gpubox budget [--json]                      each budget's ceiling, reserved, settled and left, and\n"
    "                                                   every open reservation\n"
    "       gpubox budget init [NAME] (--max-usd N --prices FILE | --max-gpu-hours H) [--default]\n"
    "       gpubox budget set NAME [--max-usd N] [--max-gpu-hours H] [--prices FILE] [--default]\n"
    "       gpubox budget default NAME|none              the budget used when a command names none\n"
    "       gpubox budget log [--follow] [--json]        the journal as readable lines (-f: follow it)\n"
    "       gpubox budget reconcile [--json]             settle reservations whose outcome is unknown\n"
    "  A budget holds each create's cost (price x resources x timeout), a job's time past its sandbox's,\n"
    "  and a pull's egress, before anything is dispatched; past --max-usd (or --max-gpu-hours, for the\n"
    "  local and container backends, price 0) the command is refused with budget_exceeded. Prices come\n"
    "  from the user's FILE (docs/budget_prices.sample; gpubox knows no price). NAME defaults to 'default';\n"
    "  the first budget becomes the default. docs/budget.md.\n";

std::string reservation_state(const budget::Reservation& r, const std::string& budget_dir) {
  if (r.confirmed) return "live";
  if (!r.failure.empty()) return "uncertain: dispatch failed (" + r.failure + "); gpubox budget reconcile";
  if (budget::InFlight::held_elsewhere(budget_dir, r.reserved.reservation)) return "in flight";
  return "uncertain: never confirmed (a gpubox stopped mid-way); gpubox budget reconcile";
}

nlohmann::json amount(std::int64_t micro) { return micro < 0 ? nlohmann::json() : nlohmann::json(static_cast<double>(micro) / 1e6); }

int show(const Global& global, bool json) {
  auto store = SandboxStore::open_default();
  if (!store) return fail("budget", store.status(), kExitUsage);
  budget::BudgetBook book(store->root());
  auto contents = book.read();
  if (!contents) return fail("budget", contents.status(), kExitFailed);
  auto ledger = budget::Ledger::fold(contents->entries);
  nlohmann::json report = {{"journal", book.journal_path()}, {"default", ledger.default_budget()}};
  nlohmann::json budgets = nlohmann::json::array();
  for (const auto& [name, b] : ledger.budgets()) {
    budgets.push_back({{"name", name},
                       {"default", name == ledger.default_budget()},
                       {"max_usd", amount(b.max_micro_usd)},
                       {"reserved_usd", amount(b.reserved_micro_usd)},
                       {"settled_usd", amount(b.settled_micro_usd)},
                       {"left_usd", b.max_micro_usd < 0 ? nlohmann::json() : amount(std::max<std::int64_t>(b.left_micro_usd(), 0))},
                       {"max_gpu_hours", amount(b.max_micro_gpu_h)},
                       {"reserved_gpu_hours", amount(b.reserved_micro_gpu_h)},
                       {"settled_gpu_hours", amount(b.settled_micro_gpu_h)},
                       {"left_gpu_hours", b.max_micro_gpu_h < 0 ? nlohmann::json() : amount(std::max<std::int64_t>(b.left_micro_gpu_h(), 0))},
                       {"prices", b.prices ? b.prices->to_json() : nlohmann::json()}});
  }
  nlohmann::json open = nlohmann::json::array();
  for (const auto& r : ledger.reservations()) {
    if (r.state != "open") continue;
    open.push_back({{"reservation", r.reserved.reservation}, {"budget", r.reserved.budget}, {"kind", r.reserved.kind},
                    {"backend", r.reserved.backend}, {"sandbox", r.sandbox}, {"name", r.reserved.name},
                    {"remote_id", r.remote_id}, {"reserved_usd", amount(r.reserved.micro_usd)},
                    {"reserved_gpu_hours", amount(r.reserved.micro_gpu_h)}, {"seconds", r.reserved.seconds},
                    {"reserved_at", r.reserved.time}, {"state", reservation_state(r, book.dir())}});
  }
  nlohmann::json problems = nlohmann::json::array();
  for (const auto& problem : contents->problems) problems.push_back({{"line", problem.line}, {"what", problem.what}});
  report["budgets"] = budgets;
  report["open_reservations"] = open;
  report["problems"] = problems;
  report["inconsistencies"] = ledger.inconsistencies();
  if (global.json || json) {
    std::cout << report.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    return kExitOk;
  }
  for (const auto& problem : contents->problems) {
    std::fprintf(stderr, "gpubox budget: %s line %lld: %s\n", book.journal_path().c_str(), static_cast<long long>(problem.line),
                 escape_for_terminal(problem.what).c_str());
  }
  for (const auto& line : ledger.inconsistencies()) std::fprintf(stderr, "gpubox budget: journal: %s\n", escape_for_terminal(line).c_str());
  if (ledger.budgets().empty()) {
    std::printf("no budget (gpubox budget init --max-usd N --prices FILE; docs/budget.md)\n");
    return kExitOk;
  }
  std::printf("%-16s %-12s %-12s %-12s %-12s %s\n", "BUDGET", "CEILING", "RESERVED", "SETTLED", "LEFT", "GPU-HOURS (ceiling/reserved/settled)");
  for (const auto& [name, b] : ledger.budgets()) {
    std::string gpu = b.max_micro_gpu_h < 0 ? "-" : budget::gpu_hours_text(b.max_micro_gpu_h);
    gpu += " / " + budget::gpu_hours_text(b.reserved_micro_gpu_h) + " / " + budget::gpu_hours_text(b.settled_micro_gpu_h);
    std::printf("%-16s %-12s %-12s %-12s %-12s %s\n", (escape_for_terminal(name) + (name == ledger.default_budget() ? "*" : "")).c_str(),
                b.max_micro_usd < 0 ? "-" : usd_text(b.max_micro_usd).c_str(), usd_text(b.reserved_micro_usd).c_str(),
                usd_text(b.settled_micro_usd).c_str(),
                b.max_micro_usd < 0 ? "-" : usd_text(std::max<std::int64_t>(b.left_micro_usd(), 0)).c_str(), gpu.c_str());
  }
  if (open.empty()) return kExitOk;
  std::printf("\nopen reservations:\n");
  for (const auto& r : ledger.reservations()) {
    if (r.state != "open") continue;
    std::string sandbox = r.sandbox.empty() ? "-" : r.sandbox;
    if (!r.reserved.name.empty()) sandbox += " (" + r.reserved.name + ")";
    std::printf("  %s  %s  %s %s  %s, %s GPU-h for %.0f s  sandbox %s: %s\n", escape_for_terminal(r.reserved.reservation).c_str(),
                escape_for_terminal(r.reserved.budget).c_str(), escape_for_terminal(r.reserved.kind).c_str(),
                escape_for_terminal(r.reserved.backend).c_str(), usd_text(r.reserved.micro_usd).c_str(),
                budget::gpu_hours_text(r.reserved.micro_gpu_h).c_str(), r.reserved.seconds, escape_for_terminal(sandbox).c_str(),
                escape_for_terminal(reservation_state(r, book.dir())).c_str());
  }
  return kExitOk;
}

// --max-usd / --max-gpu-hours: a finite number >= 0, named in the error.
Result<std::optional<double>> ceiling(const Args& args, const char* flag) {
  auto text = args.last(flag);
  if (!text) return std::optional<double>();
  auto value = parse_number(*text, 0, 1e12);
  if (!value) return Status(ErrorCode::invalid_request, std::string(flag) + " '" + *text + "': expected a number from 0 to 1e12");
  return std::optional<double>(*value);
}

Result<std::optional<budget::Prices>> prices_of(const Args& args) {
  auto file = args.last("--prices");
  if (!file) return std::optional<budget::Prices>();
  std::ifstream in(*file);
  if (!in) return Status(ErrorCode::invalid_request, "--prices: cannot read '" + *file + "': " + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  auto prices = budget::parse_prices(text.str());
  if (!prices) return Status(ErrorCode::invalid_request, "--prices " + *file + ": " + prices.status().message());
  return std::optional<budget::Prices>(*prices);
}

int define(const Args& args, bool is_new) {
  const char* command = is_new ? "budget init" : "budget set";
  auto usage = [&](const std::string& message) { return fail_usage(command, message); };
  if (args.positional.size() > 2 || (!is_new && args.positional.size() != 2)) return usage(is_new ? "expected at most one NAME" : "expected NAME");
  std::string name = args.positional.size() == 2 ? args.positional[1] : "default";
  auto max_usd = ceiling(args, "--max-usd");
  if (!max_usd) return usage(max_usd.status().message());
  auto max_gpu = ceiling(args, "--max-gpu-hours");
  if (!max_gpu) return usage(max_gpu.status().message());
  auto prices = prices_of(args);
  if (!prices) return usage(prices.status().message());
  if (is_new && *max_usd && !*prices) return usage("--prices: --max-usd needs the prices it is spent at (a prices file: docs/budget_prices.sample)");
  auto store = SandboxStore::open_default();
  if (!store) return usage(store.status().message());
  budget::BudgetBook book(store->root());
  Status done = book.define(name, *max_usd, *max_gpu, *prices, args.flag("--default"), is_new);
  if (!done) return fail_budget(command, done);
  std::fprintf(stderr, "gpubox %s: budget %s %s (journal %s)\n", command, escape_for_terminal(name).c_str(),
               is_new ? "created" : "changed", escape_for_terminal(book.journal_path()).c_str());
  return kExitOk;
}

int set_default(const Args& args) {
  if (args.positional.size() != 2) return fail_usage("budget default", "expected NAME or none");
  auto store = SandboxStore::open_default();
  if (!store) return fail("budget default", store.status(), kExitUsage);
  Status done = budget::BudgetBook(store->root()).set_default(args.positional[1]);
  return done ? kExitOk : fail_budget("budget default", done);
}

int reconcile(const Global& global, bool json) {
  auto store = SandboxStore::open_default();
  if (!store) return fail("budget reconcile", store.status(), kExitUsage);
  auto done = reconcile_reservations(*store);
  if (!done) return fail("budget reconcile", done.status(), kExitFailed);
  int code = (*done)["errors"].empty() ? kExitOk : kExitFailed;
  if (global.json || json) {
    std::cout << done->dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    return code;
  }
  for (const auto& item : (*done)["reservations"]) {
    std::printf("%s  %s  %s: %s\n", escape_for_terminal(item.value("reservation", "")).c_str(),
                escape_for_terminal(item.value("budget", "")).c_str(), escape_for_terminal(item.value("action", "")).c_str(),
                escape_for_terminal(item.value("detail", "")).c_str());
  }
  if ((*done)["reservations"].empty()) std::printf("no open reservation\n");
  for (const auto& error : (*done)["errors"]) {
    std::fprintf(stderr, "gpubox budget reconcile: %s\n", escape_for_terminal(error.get<std::string>()).c_str());
  }
  return code;
}

}  // namespace

int run_budget(const std::vector<std::string>& raw, const Global& global) {
  auto args = parse_args(raw, {"--max-usd", "--max-gpu-hours", "--prices"}, {"--default", "--follow", "-f"});
  if (!args) return fail_usage("budget", args.status());
  if (args->flag("--help")) return show_usage(kUsage);
  std::string sub = args->positional.empty() ? "show" : args->positional[0];
  bool json = args->flag("--json");
  bool changes = sub == "init" || sub == "set";
  if (!changes && (args->last("--max-usd") || args->last("--max-gpu-hours") || args->last("--prices") || args->flag("--default"))) {
    return fail_usage("budget", "--max-usd, --max-gpu-hours, --prices and --default go with init or set");
  }
  if (sub != "log" && (args->flag("--follow") || args->flag("-f"))) return fail_usage("budget", "--follow goes with log");
  if (sub == "show" || sub == "ls") {
    if (args->positional.size() > 1) return fail_usage("budget", "unexpected argument '" + args->positional[1] + "'");
    return show(global, json);
  }
  if (sub == "init") return define(*args, true);
  if (sub == "set") return define(*args, false);
  if (sub == "default") return set_default(*args);
  if (sub == "log") return print_budget_log(global.json || json, args->flag("--follow") || args->flag("-f"));
  if (sub == "reconcile") return reconcile(global, json);
  return fail_usage("budget", "unknown subcommand '" + sub + "' (init, set, default, log, reconcile)");
}

}  // namespace gpubox::host::cli
