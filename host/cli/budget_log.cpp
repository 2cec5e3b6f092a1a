#include "host/cli/budget_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <thread>

#include "base/terminal_text.h"
#include "host/budget/book.h"
#include "host/budget/ledger.h"
#include "host/cli/cli.h"

namespace gpubox::host::cli {
namespace {


std::string utc(double time) {
  std::time_t seconds = static_cast<std::time_t>(time);
  std::tm tm{};
  ::gmtime_r(&seconds, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

std::string quoted(const std::string& text) { return "'" + escape_for_terminal(text) + "'"; }

// Prints the complete lines of text from *offset on, and moves *offset past them.
void print_new(const std::string& text, std::size_t* offset, std::int64_t* line_number, bool json) {
  std::size_t consumed = 0;
  budget::JournalContents contents = budget::parse_journal(text.substr(*offset), true, &consumed);
  // parse_journal numbers from 1 within the slice; entries and problems are in file order together.
  std::size_t next_entry = 0, next_problem = 0;
  for (std::int64_t line = 1; line <= contents.lines; ++line) {
    ++*line_number;
    if (next_problem < contents.problems.size() && contents.problems[next_problem].line == line) {
      const auto& problem = contents.problems[next_problem++];
      if (json) {
        std::printf("%s\n", nlohmann::json({{"line", *line_number}, {"problem", problem.what}}).dump().c_str());
      } else {
        std::printf("line %lld: %s\n", static_cast<long long>(*line_number), escape_for_terminal(problem.what).c_str());
      }
      continue;
    }
    if (next_entry >= contents.entries.size()) break;
    const auto& entry = contents.entries[next_entry++];
    if (json) {
      std::printf("%s\n", entry.to_json().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    } else {
      std::printf("%s\n", budget_log_line(entry).c_str());
    }
  }
  std::fflush(stdout);
  *offset += consumed;
}

}  // namespace

std::string budget_log_line(const budget::JournalEntry& e) {
  std::string line = utc(e.time) + "  " + escape_for_terminal(e.op);
  if (e.op == "define") {
    line += "  budget " + quoted(e.budget) + " ceiling " + (e.max_micro_usd < 0 ? "-" : budget::usd_text(e.max_micro_usd)) +
            ", " + (e.max_micro_gpu_h < 0 ? "-" : budget::gpu_hours_text(e.max_micro_gpu_h)) + " GPU-hours" +
            (e.prices.is_object() ? ", prices from " + quoted(e.prices.value("source", "")) : ", no prices") +
            (e.make_default ? " (default)" : "");
  } else if (e.op == "default") {
    line += "  budget " + quoted(e.budget);
  } else if (e.op == "reserve") {
    line += "  " + escape_for_terminal(e.reservation) + "  budget " + quoted(e.budget) + "  " + budget::usd_text(e.micro_usd) +
            ", " + budget::gpu_hours_text(e.micro_gpu_h) + " GPU-h  " + escape_for_terminal(e.kind) + " on " +
            escape_for_terminal(e.backend) + " for " + std::to_string(static_cast<long long>(e.seconds)) + " s";
    if (!e.sandbox.empty()) line += "  sandbox " + quoted(e.sandbox);
    if (!e.name.empty()) line += "  name " + quoted(e.name);
    if (!e.app.empty()) line += "  app " + quoted(e.app);
  } else if (e.op == "confirm") {
    line += "  " + escape_for_terminal(e.reservation) + "  sandbox " + quoted(e.sandbox);
    if (!e.remote_id.empty()) line += "  remote " + quoted(e.remote_id);
  } else if (e.op == "settle") {
    line += "  " + escape_for_terminal(e.reservation) + "  spent " + budget::usd_text(e.micro_usd) + ", " +
            budget::gpu_hours_text(e.micro_gpu_h) + " GPU-h  " + quoted(e.text);
  } else if (e.op == "failed" || e.op == "release") {
    line += "  " + escape_for_terminal(e.reservation) + "  " + quoted(e.text);
  } else if (e.op == "torn") {
    line += "  line " + std::to_string(e.line) + " was torn (a writer stopped mid-line; nothing was dispatched for it): " +
            quoted(e.text);
  }
  return line;
}

int print_budget_log(bool json, bool follow) {
  auto store = SandboxStore::open_default();
  if (!store) return fail("budget log", store.status(), kExitUsage);
  std::string path = budget::BudgetBook(store->root()).journal_path();
  std::size_t offset = 0;
  std::int64_t line_number = 0;
  std::string text;
  while (true) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 && errno != ENOENT) return fail("budget log", Status::from_errno(errno, "cannot open '" + path + "'"), kExitFailed);
    if (fd >= 0) {
      char buffer[65536];
      ssize_t n;
      while ((n = ::pread(fd, buffer, sizeof buffer, static_cast<off_t>(text.size()))) > 0) text.append(buffer, static_cast<size_t>(n));
      ::close(fd);
    }
    print_new(text, &offset, &line_number, json);
    if (!follow) {
      if (offset < text.size()) {  // a last line with no end: torn, unless a writer is in the middle of it
        std::string tail = text.substr(offset);
        budget::JournalContents torn = budget::parse_journal(tail);
        for (const auto& problem : torn.problems) {
          std::printf("line %lld: %s\n", static_cast<long long>(line_number + problem.line), escape_for_terminal(problem.what).c_str());
        }
      }
      return kExitOk;
    }
    // A viewer polls: it must never hold up a writer by taking the journal's lock.
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

}  // namespace gpubox::host::cli
