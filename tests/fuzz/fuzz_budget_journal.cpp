// The budget journal's reader (host/budget/journal.h, ledger.h): whole journal
// texts, torn tails included, parsed and folded. A journal is written by
// gpubox, but a crash, a full disk or a hand edit can leave anything in it.
#include <cstddef>
#include <cstdint>
#include <string>

#include "base/terminal_text.h"
#include "host/budget/amounts.h"
#include "host/budget/journal.h"
#include "host/budget/ledger.h"

// Traps when the escaped text still holds a C0, DEL, C1 or bidi control.
static void check_shown(const std::string& text) {
  std::string shown = gpubox::escape_for_terminal(text);
  for (unsigned char c : shown) {
    if (c < 0x20 || c == 0x7f) __builtin_trap();
  }
  for (const char* control : {"\xc2\x80", "\xc2\x9b", "\xc2\x9f", "\u202a", "\u202e", "\u2066", "\u2069", "\u200e", "\u200f", "\u061c"}) {
    if (shown.find(control) != std::string::npos) __builtin_trap();
  }
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > 1 << 16) return 0;
  std::string text(reinterpret_cast<const char*>(data), size);  // NOLINT: bytes as chars
  using namespace gpubox::host::budget;
  for (bool partial : {false, true}) {
    std::size_t consumed = 0;
    JournalContents contents = parse_journal(text, partial, &consumed);
    if (consumed > text.size()) __builtin_trap();
    // Every line is an entry or a problem, never dropped.
    if (contents.entries.size() + contents.problems.size() != static_cast<std::size_t>(contents.lines)) __builtin_trap();
    Ledger ledger = Ledger::fold(contents.entries);
    // Every amount read is within the bound, and the fold's sums never overflow (UBSan would
    // trap on a wrapped sum): a sum of amounts >= 0 stays >= 0, held at the bound at worst.
    for (const auto& entry : contents.entries) {
      if (entry.micro_usd > kMaxMicro || entry.micro_gpu_h > kMaxMicro || entry.max_micro_usd > kMaxMicro) __builtin_trap();
    }
    for (const auto& [name, budget] : ledger.budgets()) {
      (void)usd_text(budget.left_micro_usd());
      (void)usd_text(budget.committed_micro_usd());
      if (budget.settled_micro_usd < 0 || budget.settled_micro_gpu_h < 0) __builtin_trap();
    }
    // Every entry that parsed writes a line (its op's fields) that parses back to the same line.
    for (const auto& entry : contents.entries) {
      nlohmann::json line = entry.to_json();
      auto again = parse_journal_line(line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
      if (!again || again->to_json() != line) __builtin_trap();
    }
  }
  // Whatever is shown on a terminal has no control character left: the raw text, and each
  // reservation id as JSON decoded it (\u001b and the like).
  check_shown(text);
  for (const auto& entry : parse_journal(text).entries) check_shown(entry.reservation);
  return 0;
}
