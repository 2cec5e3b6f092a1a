// host/budget/prices.h, journal.h and ledger.h: the prices file, the
// journal's lines and their fold, torn lines, and the escaping of what a
// terminal is shown. No store, no lock contention (budget_book_test.cpp).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <limits>

#include "base/terminal_text.h"
#include "host/budget/journal.h"
#include "host/budget/ledger.h"
#include "host/budget/prices.h"
#include "tests/unit/temp_dir.h"

namespace gpubox::host::budget {
namespace {

using ::testing::HasSubstr;

TEST(BudgetPrices, ReadsEveryKeyOfAPricesFile) {
  auto prices = parse_prices(
      "# read from https://modal.com/pricing\n"
      "source = Modal's pricing page, 2026-12-01\n"
      "gpu_hour.H100 = 3.95\n"
      "gpu_hour.A100-80GB = 2.5   # per GPU\n"
      "\n"
      "cpu_core_hour = 0.135\nmemory_gib_hour = 0.024\negress_gib = 0.1\ncreate = 0.01\n"
      "default_cpu_cores = 0.125\ndefault_memory_gib = 0.5");
  ASSERT_TRUE(prices) << prices.status().to_string();
  EXPECT_DOUBLE_EQ(prices->gpu_hour.at("H100"), 3.95);
  EXPECT_DOUBLE_EQ(prices->gpu_hour.at("A100-80GB"), 2.5);
  EXPECT_DOUBLE_EQ(prices->cpu_core_hour, 0.135);
  EXPECT_DOUBLE_EQ(prices->memory_gib_hour, 0.024);
  EXPECT_DOUBLE_EQ(prices->egress_gib, 0.1);
  EXPECT_DOUBLE_EQ(prices->create, 0.01);
  EXPECT_DOUBLE_EQ(prices->default_cpu_cores.value_or(-1), 0.125);
  EXPECT_DOUBLE_EQ(prices->default_memory_gib.value_or(-1), 0.5);
  EXPECT_EQ(prices->source, "Modal's pricing page, 2026-12-01");
  auto again = Prices::from_json(prices->to_json());
  ASSERT_TRUE(again);
  EXPECT_EQ(again->gpu_hour, prices->gpu_hour);
  EXPECT_EQ(again->default_memory_gib, prices->default_memory_gib);
}

TEST(BudgetPrices, RefusesBadPricesNamingTheLineAndKey) {
  struct Case {
    const char* text;
    const char* names;
  } cases[] = {
      {"gpu_hour.H100 = nan\n", "line 1, gpu_hour.H100"},
      {"create = 0\ncpu_core_hour = -0.5\n", "line 2, cpu_core_hour"},
      {"memory_gib_hour = inf\n", "line 1, memory_gib_hour"},
      {"egress_gib = 1e400\n", "line 1, egress_gib"},
      {"create =\n", "line 1, create"},
      {"create = 1 dollar\n", "line 1, create"},
      {"gpu_hour.H100 = 1\ngpu_hour.H100 = 2\n", "line 2, gpu_hour.H100: given twice"},
      {"gpu_price = 1\n", "line 1, gpu_price: unknown key"},
      {"gpu_hour. = 1\n", "line 1, gpu_hour."},
      {"gpu_hour.H 100 = 1\n", "line 1, gpu_hour.H 100"},
      {"just words\n", "line 1: expected KEY = NUMBER"},
      // Hex, which strtod reads (0x10 as 16), and the spellings of inf and nan: never a price.
      {"gpu_hour.H100 = 0x10\n", "line 1, gpu_hour.H100: expected a decimal number >= 0 (digits, '.', an exponent), got '0x10'"},
      {"create = infinity\n", "line 1, create: expected a decimal number"},
      {"create = NAN\n", "line 1, create: expected a decimal number"},
      {"create = -0\n", "line 1, create: expected a number >= 0, got '-0'"},
      // Above the bound: the key, the value and the bound.
      {"gpu_hour.H100 = 1e13\n", "line 1, gpu_hour.H100: 1e13 is above the bound of 1000000"},
      {"gpu_hour.H100 = 1e300\n", "line 1, gpu_hour.H100: 1e300 is above the bound of 1000000"},
      {"default_memory_gib = 1000000.5\n", "line 1, default_memory_gib: 1000000.5 is above the bound of 1000000"},
  };
  for (const auto& c : cases) {
    auto prices = parse_prices(c.text);
    ASSERT_FALSE(prices) << c.text;
    EXPECT_EQ(prices.status().code(), ErrorCode::invalid_request);
    EXPECT_THAT(prices.status().message(), HasSubstr(c.names)) << c.text;
  }
  EXPECT_FALSE(parse_prices(std::string(kMaxPricesFileBytes + 1, '#')));
  // A NUL byte is named with its place, never quoted (a message cut at it said "got 'cpu_core_hour").
  auto nul = parse_prices(std::string("create = 0\ncpu_core_hour\0 = 1\n", 30));
  ASSERT_FALSE(nul);
  EXPECT_EQ(nul.status().message(), "line 2: a NUL byte at column 14: a prices file is text, one KEY = NUMBER a line");
  // The JSON form refuses what the file form refuses.
  EXPECT_FALSE(Prices::from_json({{"gpu_hour", {{"H100", -1}}}}));
  EXPECT_FALSE(Prices::from_json({{"create", "free"}}));
  EXPECT_FALSE(Prices::from_json({{"gpu_hour", {{"H100", 1e13}}}}));
  EXPECT_FALSE(Prices::from_json({{"cpu_core_hour", 1e300}}));
  // The bound itself is a price.
  auto at_bound = parse_prices("gpu_hour.H100 = 1000000\ncreate = 1e6\n");
  ASSERT_TRUE(at_bound) << at_bound.status().to_string();
  EXPECT_EQ(at_bound->gpu_hour.at("H100"), kMaxPrice);
}

TEST(BudgetJournal, ParsesItsOwnLinesAndRefusesOthers) {
  JournalEntry reserve;
  reserve.op = "reserve";
  reserve.time = 12.5;
  reserve.budget = "lab";
  reserve.reservation = "r-1";
  reserve.micro_usd = 3'950'000;
  reserve.micro_gpu_h = 1'000'000;
  reserve.kind = "create";
  reserve.name = "evil\x1b[2Jname";
  reserve.seconds = 3600;
  auto back = parse_journal_line(reserve.to_json().dump());
  ASSERT_TRUE(back) << back.status().to_string();
  EXPECT_EQ(back->micro_usd, 3'950'000);
  EXPECT_EQ(back->name, reserve.name);
  EXPECT_EQ(back->seconds, 3600);
  for (const char* line : {"", "{", "[]", "{\"op\":\"spend\"}", "{\"op\":\"reserve\",\"budget\":\"b\"}",
                           "{\"op\":\"settle\",\"reservation\":\"r\",\"micro_usd\":-1}",
                           "{\"op\":\"reserve\",\"budget\":\"b\",\"reservation\":\"r\",\"micro_usd\":\"1\"}",
                           "{\"op\":\"define\"}"}) {
    EXPECT_FALSE(parse_journal_line(line)) << line;
  }
}

TEST(BudgetJournal, ATornLastLineIsReportedNotDropped) {
  std::string whole = "{\"op\":\"define\",\"t\":1,\"budget\":\"lab\",\"max_micro_usd\":5,\"max_micro_gpu_h\":-1}\n";
  std::string text = whole + "{\"op\":\"reserve\",\"t\":2,\"budget\":\"la";
  JournalContents contents = parse_journal(text);
  EXPECT_EQ(contents.lines, 2);
  ASSERT_EQ(contents.entries.size(), 1u);
  ASSERT_EQ(contents.problems.size(), 1u);
  EXPECT_EQ(contents.problems[0].line, 2);
  EXPECT_THAT(contents.problems[0].what, HasSubstr("torn"));
  // A follower mid-write sees only the whole lines, and where to go on from.
  std::size_t consumed = 0;
  contents = parse_journal(text, true, &consumed);
  EXPECT_TRUE(contents.problems.empty());
  EXPECT_EQ(consumed, whole.size());
  // A bad line in the middle is a problem too, in its place.
  contents = parse_journal(whole + "garbage\n" + whole);
  ASSERT_EQ(contents.problems.size(), 1u);
  EXPECT_EQ(contents.problems[0].line, 2);
  EXPECT_THAT(contents.problems[0].what, HasSubstr("unreadable"));
  EXPECT_EQ(contents.entries.size(), 2u);
}

TEST(BudgetJournal, TheWriterSealsATornLineAndReadersStillSeeIt) {
  test::TempDir dir;
  std::string root = dir.path();
  Journal journal(root);
  ASSERT_TRUE(journal.lock_and_read());
  JournalEntry define;
  define.op = "define";
  define.budget = "lab";
  define.max_micro_usd = 10;
  ASSERT_TRUE(journal.append({define}));
  journal.unlock();
  {
    std::ofstream out(journal.path(), std::ios::app);
    out << "{\"op\":\"reserve\",\"bud";  // a writer that died in write()
  }
  auto before = journal.read();
  ASSERT_TRUE(before);
  ASSERT_EQ(before->problems.size(), 1u);
  EXPECT_THAT(before->problems[0].what, HasSubstr("torn"));

  auto sealed = journal.lock_and_read();
  ASSERT_TRUE(sealed) << sealed.status().to_string();
  ASSERT_TRUE(journal.append({define}));
  journal.unlock();
  auto after = journal.read();
  ASSERT_TRUE(after);
  EXPECT_EQ(after->lines, 4) << "define, the torn line, the torn record, define";
  ASSERT_EQ(after->problems.size(), 1u);
  EXPECT_EQ(after->problems[0].line, 2);
  EXPECT_THAT(after->problems[0].what, HasSubstr("torn (sealed at line 3)"));
  EXPECT_EQ(after->entries[1].op, "torn");
  EXPECT_EQ(after->entries[1].text, "{\"op\":\"reserve\",\"bud");
}

TEST(BudgetLedger, FoldsReservationsSettlementsAndReleases) {
  auto entry = [](std::string op, std::string reservation, std::int64_t usd) {
    JournalEntry e;
    e.op = std::move(op);
    e.budget = "lab";
    e.reservation = std::move(reservation);
    e.micro_usd = usd;
    return e;
  };
  JournalEntry define = entry("define", "", 0);
  define.max_micro_usd = 10'000'000;
  define.make_default = true;
  Ledger ledger = Ledger::fold({define, entry("reserve", "r-1", 4'000'000), entry("reserve", "r-2", 3'000'000),
                                entry("settle", "r-1", 1'500'000), entry("release", "r-2", 0), entry("settle", "r-2", 1),
                                entry("settle", "r-9", 1)});
  const BudgetState* lab = ledger.budget("lab");
  ASSERT_NE(lab, nullptr);
  EXPECT_EQ(ledger.default_budget(), "lab");
  EXPECT_EQ(lab->reserved_micro_usd, 0);
  EXPECT_EQ(lab->settled_micro_usd, 1'500'000);
  EXPECT_EQ(lab->left_micro_usd(), 8'500'000);
  EXPECT_EQ(ledger.reservation("r-1")->state, "settled");
  EXPECT_EQ(ledger.reservation("r-2")->state, "released");
  EXPECT_EQ(ledger.inconsistencies().size(), 2u) << "a second settle of r-2, a settle of an unknown r-9";
  EXPECT_EQ(usd_text(1'500'000), "$1.50");
  EXPECT_EQ(usd_text(1'234'567), "$1.234567");
  EXPECT_EQ(gpu_hours_text(2'500'000), "2.50");
}

TEST(BudgetEscape, NoControlCharacterReachesTheTerminal) {
  EXPECT_EQ(escape_for_terminal("plain name-1.ok"), "plain name-1.ok");
  EXPECT_EQ(escape_for_terminal("a\x1b[2Jb"), "a\\x1b[2Jb");
  EXPECT_EQ(escape_for_terminal("bell\a\r\n\x7f"), "bell\\x07\\x0d\\x0a\\x7f");
  EXPECT_EQ(escape_for_terminal("back\\slash"), "back\\\\slash");
  EXPECT_EQ(escape_for_terminal("\xc2\x9b" "31m"), "\\u009b31m") << "C1 CSI in UTF-8";
  EXPECT_EQ(escape_for_terminal("\x9b" "31m"), "\\x9b31m") << "a lone C1 byte";
  EXPECT_EQ(escape_for_terminal("caf\xc3\xa9 \xe2\x82\xac"), "caf\xc3\xa9 \xe2\x82\xac") << "UTF-8 text stays";
  EXPECT_EQ(escape_for_terminal("\xe2\x80\xa8"), "\\u2028");
  EXPECT_EQ(escape_for_terminal("\xc0\xaf"), "\\xc0\\xaf") << "an overlong form";
  // OSC (retitle) and clear-screen, as a hostile reservation id held them.
  EXPECT_EQ(escape_for_terminal("r-\x1b]0;pwned\x07\x1b[2J"), "r-\\x1b]0;pwned\\x07\\x1b[2J");
  // Bidirectional controls: every embedding, override, isolate and mark.
  EXPECT_EQ(escape_for_terminal("a\u202eb\u202ac\u202bd\u202ce\u202df"), "a\\u202eb\\u202ac\\u202bd\\u202ce\\u202df");
  EXPECT_EQ(escape_for_terminal("\u2066\u2067\u2068\u2069"), "\\u2066\\u2067\\u2068\\u2069");
  EXPECT_EQ(escape_for_terminal("\u200e\u200f\u061c"), "\\u200e\\u200f\\u061c");
  EXPECT_EQ(escape_for_terminal("\u2065\u2070\u200d"), "\u2065\u2070\u200d") << "their neighbours stay";
  // A message of several lines keeps its newlines, and only them.
  EXPECT_EQ(escape_for_terminal("one\ntwo\r\x1b[2J", true), "one\ntwo\\x0d\\x1b[2J");
}

// The amounts of a hand-edited journal: a line beyond $1e12 is unreadable, and sums that would
// overflow int64 are held at the bound (the budget admits nothing more) and reported.
TEST(BudgetLedger, AmountsBeyondTheBoundAreRefusedAndSumsNeverOverflow) {
  auto huge = parse_journal_line(R"({"op":"reserve","t":1,"budget":"b","reservation":"r-1","micro_usd":9223372036854775807})");
  ASSERT_FALSE(huge);
  EXPECT_THAT(huge.status().message(), HasSubstr("an amount beyond 1000000000000000000 millionths"));
  std::string text = R"({"op":"define","t":1,"budget":"b","max_micro_usd":50000000,"max_micro_gpu_h":-1,"prices":null,"default":true})" "\n";
  for (int i = 0; i < 10; ++i) {
    text += R"({"op":"reserve","t":2,"budget":"b","reservation":"r-)" + std::to_string(i) +
            R"(","micro_usd":1000000000000000000,"micro_gpu_h":0})" "\n";
  }
  JournalContents contents = parse_journal(text);
  ASSERT_TRUE(contents.problems.empty()) << contents.problems[0].what;
  Ledger ledger = Ledger::fold(contents.entries);
  const BudgetState* b = ledger.budget("b");
  ASSERT_TRUE(b);
  EXPECT_EQ(b->reserved_micro_usd, std::numeric_limits<std::int64_t>::max()) << "held at the bound, not wrapped negative";
  EXPECT_LT(b->left_micro_usd(), 0) << "a budget whose sum overflowed is full";
  EXPECT_THAT(ledger.inconsistencies(), ::testing::Contains(HasSubstr("reservation r-9: its amount overflows its budget's sum")));
  EXPECT_EQ(usd_text(std::numeric_limits<std::int64_t>::min()), "-$9223372036854.775808");
}

}  // namespace
}  // namespace gpubox::host::budget
