// The budget journal's reader (host/budget/journal.h, ledger.h): whole journal
// texts, torn tails included, parsed and folded. A journal is written by
// gpubox, but a crash, a full disk or a hand edit can leave anything in it.
#include <cstddef>
#include <cstdint>
#include <string>

#include "host/budget/journal.h"
#include "host/budget/ledger.h"

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
    for (const auto& [name, budget] : ledger.budgets()) (void)usd_text(budget.left_micro_usd());
    // Every entry that parsed writes a line (its op's fields) that parses back to the same line.
    for (const auto& entry : contents.entries) {
      nlohmann::json line = entry.to_json();
      auto again = parse_journal_line(line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
      if (!again || again->to_json() != line) __builtin_trap();
    }
  }
  // Whatever is shown on a terminal has no control character left.
  std::string shown = escape_for_terminal(text);
  for (unsigned char c : shown) {
    if (c < 0x20 || c == 0x7f) __builtin_trap();
  }
  return 0;
}
