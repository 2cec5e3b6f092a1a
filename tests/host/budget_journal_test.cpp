// host/budget/prices.h, journal.h and ledger.h: the prices file, the
// journal's lines and their fold, torn lines, and the escaping of what a
// terminal is shown. No store, no lock contention (budget_book_test.cpp).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>

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
  };
  for (const auto& c : cases) {
    auto prices = parse_prices(c.text);
    ASSERT_FALSE(prices) << c.text;
    EXPECT_EQ(prices.status().code(), ErrorCode::invalid_request);
    EXPECT_THAT(prices.status().message(), HasSubstr(c.names)) << c.text;
  }
  EXPECT_FALSE(parse_prices(std::string(kMaxPricesFileBytes + 1, '#')));
  // The JSON form refuses what the file form refuses.
  EXPECT_FALSE(Prices::from_json({{"gpu_hour", {{"H100", -1}}}}));
  EXPECT_FALSE(Prices::from_json({{"create", "free"}}));
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
}

}  // namespace
}  // namespace gpubox::host::budget
