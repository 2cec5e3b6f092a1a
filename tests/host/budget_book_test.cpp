// host/budget/book.h and sandbox_budget.h against a real journal in a temp
// store: a ceiling reached exactly and then refused with nothing written,
// eight processes racing for a ceiling that admits three, settlement, a job
// that outlives its sandbox's reservation, bad input, and the in-flight lock.
#include "host/budget/book.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <ctime>
#include <fstream>
#include <thread>

#include "host/budget/sandbox_budget.h"
#include "tests/unit/temp_dir.h"

namespace gpubox::host::budget {
namespace {

using ::testing::HasSubstr;

Prices h100_at(double per_hour) {
  Prices prices;
  prices.gpu_hour["H100"] = per_hour;
  return prices;
}

// One H100 for an hour: $1 at h100_at(1).
Ask one_gpu_hour(const std::string& budget = "") {
  Ask ask;
  ask.budget = budget;
  ask.kind = "create";
  ask.backend = "modal";
  ask.priced = true;
  ask.gpu_type = "H100";
  ask.gpu_count = 1;
  ask.seconds = 3600;
  ask.create = true;
  return ask;
}

// The journal's lines, read without its lock (the test itself may hold it).
std::int64_t lines_of_unlocked(const std::string& path) {
  std::ifstream in(path);
  std::int64_t lines = 0;
  for (std::string line; std::getline(in, line);) ++lines;
  return lines;
}

std::int64_t lines_of(const BudgetBook& book) {
  auto contents = book.read();
  return contents ? contents->lines : -1;
}

TEST(BudgetBook, TheCeilingIsReachedExactlyThenTheNextAskIsRefusedWithNothingWritten) {
  test::TempDir dir;
  BudgetBook book(dir.path());
  ASSERT_TRUE(book.define("lab", 3.0, std::nullopt, h100_at(1.0), false, true));
  for (int i = 0; i < 3; ++i) {
    auto reserved = book.reserve(one_gpu_hour());
    ASSERT_TRUE(reserved) << reserved.status().to_string();
    ASSERT_TRUE(reserved->has_value()) << "the first budget is the default";
    EXPECT_EQ((*reserved)->micro_usd, 1'000'000);
    EXPECT_EQ((*reserved)->budget, "lab");
  }
  std::int64_t before = lines_of(book);
  Refusal refusal;
  auto refused = book.reserve(one_gpu_hour(), &refusal);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.status().code(), ErrorCode::resource_exhausted);
  EXPECT_THAT(refused.status().message(), HasSubstr("budget_exceeded: budget lab (ceiling $3.00)"));
  EXPECT_THAT(refused.status().message(), HasSubstr("reservation of $1.00: $3.00 is reserved or settled, $0.00 remains"));
  EXPECT_EQ(refusal.budget, "lab");
  EXPECT_EQ(refusal.asked_micro, 1'000'000);
  EXPECT_EQ(refusal.left_micro, 0);
  EXPECT_EQ(lines_of(book), before) << "a refusal writes nothing";
}

TEST(BudgetBook, EightProcessesRacingForACeilingOfThreeGetExactlyThree) {
  test::TempDir dir;
  ASSERT_TRUE(BudgetBook(dir.path()).define("lab", 3.0, std::nullopt, h100_at(1.0), true, true));
  int gate[2];
  ASSERT_EQ(::pipe(gate), 0);
  std::vector<pid_t> children;
  for (int i = 0; i < 8; ++i) {
    pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      ::close(gate[1]);
      char byte;
      (void)::read(gate[0], &byte, 1);  // all start together when the parent closes the gate
      BudgetBook book(dir.path());
      auto reserved = book.reserve(one_gpu_hour("lab"));
      ::_exit(reserved && reserved->has_value() ? 0 : reserved.status().code() == ErrorCode::resource_exhausted ? 1 : 2);
    }
    children.push_back(child);
  }
  ::close(gate[0]);
  ::close(gate[1]);
  int admitted = 0, refused = 0;
  for (pid_t child : children) {
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status));
    ASSERT_NE(WEXITSTATUS(status), 2) << "a reservation failed for another reason than the ceiling";
    (WEXITSTATUS(status) == 0 ? admitted : refused)++;
  }
  EXPECT_EQ(admitted, 3);
  EXPECT_EQ(refused, 5);
  auto contents = BudgetBook(dir.path()).read();
  ASSERT_TRUE(contents);
  EXPECT_TRUE(contents->problems.empty());
  Ledger ledger = Ledger::fold(contents->entries);
  EXPECT_EQ(ledger.budget("lab")->reserved_micro_usd, 3'000'000);
  EXPECT_EQ(ledger.reservations().size(), 3u);
}

// What the kernel says a process waits in ("fcntl_setlk" while it waits for a record lock).
std::string waiting_in(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/wchan");
  std::string what;
  std::getline(in, what);
  return what;
}

TEST(BudgetBook, AReservationWaitsForTheJournalsLockAndWritesOnlyOnceItHasIt) {
  test::TempDir dir;
  BudgetBook book(dir.path());
  ASSERT_TRUE(book.define("lab", 3.0, std::nullopt, h100_at(1.0), true, true));
  std::int64_t before = lines_of(book);
  // Another writer holds the journal: a reservation must wait, not read and write beside it.
  int held = ::open(book.journal_path().c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(held, 0);
  struct flock lock {};
  lock.l_type = F_WRLCK;
  lock.l_whence = SEEK_SET;
  ASSERT_EQ(::fcntl(held, F_OFD_SETLK, &lock), 0);
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(held);  // the lock belongs to the open file description: the child must not keep it alive
    auto reserved = BudgetBook(dir.path()).reserve(one_gpu_hour());
    ::_exit(reserved && reserved->has_value() ? 0 : 1);
  }
  bool waits = false;
  for (auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10); std::chrono::steady_clock::now() < give_up;) {
    if (waiting_in(child).find("setlk") != std::string::npos) {
      waits = true;
      break;
    }
    ASSERT_EQ(::waitpid(child, nullptr, WNOHANG), 0) << "the reservation went ahead while another writer held the journal";
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_TRUE(waits) << "the reservation never waited for the lock (wchan: " << waiting_in(child) << ")";
  EXPECT_EQ(lines_of_unlocked(book.journal_path()), before) << "nothing written while the lock is held elsewhere";
  ::close(held);  // drops the lock
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_EQ(lines_of(book), before + 1);
}

TEST(BudgetBook, SettlingATerminatedSandboxReturnsTheUnusedPart) {
  test::TempDir dir;
  BudgetBook book(dir.path());
  Prices prices = h100_at(2.0);
  prices.create = 0.25;
  ASSERT_TRUE(book.define("lab", 10.0, std::nullopt, prices, true, true));
  auto reserved = book.reserve(one_gpu_hour());
  ASSERT_TRUE(reserved && reserved->has_value());
  EXPECT_EQ((*reserved)->micro_usd, 2'250'000) << "$2 an hour for an hour, and the create";
  ASSERT_TRUE(book.confirm((*reserved)->id, "abcdefabcdef", "sb-1"));
  ASSERT_TRUE(book.settle_sandbox("abcdefabcdef", 900.0, "terminated by gpubox"));
  auto contents = book.read();
  ASSERT_TRUE(contents);
  Ledger ledger = Ledger::fold(contents->entries);
  const BudgetState* lab = ledger.budget("lab");
  EXPECT_EQ(lab->reserved_micro_usd, 0);
  EXPECT_EQ(lab->settled_micro_usd, 750'000) << "a quarter of an hour at $2, and the create";
  EXPECT_EQ(lab->settled_micro_gpu_h, 250'000);
  EXPECT_EQ(lab->left_micro_usd(), 9'250'000);
  EXPECT_EQ(ledger.reservation((*reserved)->id)->state, "settled");
  // A second settle finds nothing open and changes nothing.
  std::int64_t before = lines_of(book);
  ASSERT_TRUE(book.settle_sandbox("abcdefabcdef", 10.0, "again"));
  EXPECT_EQ(lines_of(book), before);
}

TEST(BudgetBook, LocalGpuHoursAreHeldAtPriceZero) {
  test::TempDir dir;
  BudgetBook book(dir.path());
  ASSERT_TRUE(book.define("rig", std::nullopt, 4.0, std::nullopt, true, true));
  Ask ask;
  ask.kind = "create";
  ask.backend = "local";
  ask.gpu_count = 2;
  ask.seconds = 3600;
  ask.create = true;
  auto first = book.reserve(ask);
  ASSERT_TRUE(first && first->has_value()) << first.status().to_string();
  EXPECT_EQ((*first)->micro_usd, 0);
  EXPECT_EQ((*first)->micro_gpu_h, 2'000'000);
  ASSERT_TRUE(book.reserve(ask));
  auto third = book.reserve(ask);
  ASSERT_FALSE(third);
  EXPECT_THAT(third.status().message(), HasSubstr("ceiling 4.00 GPU-hours"));
}

TEST(BudgetBook, BadInputIsAUsageErrorNamingTheFieldAndChangesNothing) {
  test::TempDir dir;
  BudgetBook book(dir.path());
  ASSERT_TRUE(book.define("lab", 2.0, std::nullopt, h100_at(1.0), true, true));
  ASSERT_TRUE(book.reserve(one_gpu_hour()));
  std::int64_t before = lines_of(book);
  auto expect_usage = [&](const Status& status, const std::string& names) {
    EXPECT_EQ(status.code(), ErrorCode::invalid_request) << status.to_string();
    EXPECT_THAT(status.message(), HasSubstr(names));
    EXPECT_EQ(lines_of(book), before) << names;
  };
  Ask a10 = one_gpu_hour();
  a10.gpu_type = "A10G";
  expect_usage(book.reserve(a10).status(), "--gpu A10G: budget lab's prices have no gpu_hour.A10G");
  expect_usage(book.reserve(one_gpu_hour("nope")).status(), "--budget nope: no such budget");
  expect_usage(book.define("lab", 0.5, std::nullopt, std::nullopt, false, false), "--max-usd 0.5: below what budget lab has reserved");
  expect_usage(book.define("lab", 5.0, std::nullopt, std::nullopt, false, true), "budget lab exists already");
  expect_usage(book.define("other", 5.0, std::nullopt, std::nullopt, false, false), "NAME other: no such budget");
  expect_usage(book.define("bad name", 5.0, std::nullopt, std::nullopt, false, true), "NAME 'bad name'");
  expect_usage(book.define("x", std::nullopt, std::nullopt, std::nullopt, false, true), "needs a ceiling");
  expect_usage(book.set_default("nope"), "NAME nope: no such budget");
  Prices cpu_priced = h100_at(1.0);
  cpu_priced.cpu_core_hour = 0.1;
  ASSERT_TRUE(book.define("cpu", 100.0, std::nullopt, cpu_priced, false, true));
  before = lines_of(book);
  expect_usage(book.reserve(one_gpu_hour("cpu")).status(), "--cpu: budget cpu prices CPU cores: give --cpu");
  // Raising the ceiling is fine, and "none" turns the default off.
  ASSERT_TRUE(book.define("lab", 5.0, std::nullopt, std::nullopt, false, false));
  ASSERT_TRUE(book.set_default("none"));
  auto unbudgeted = book.reserve(one_gpu_hour());
  ASSERT_TRUE(unbudgeted);
  EXPECT_FALSE(unbudgeted->has_value());
}

// The reproduction of issue 46: gpu_hour.H100 = 1e13 under a $50 ceiling journaled
// micro_usd -9223372036854775808 and went on to dispatch. Such prices are refused, and a
// reservation too large for any ceiling is refused before anything is written.
TEST(BudgetBook, AReservationBeyondAnyAmountIsRefusedBeforeDispatchAndNeverJournaled) {
  test::TempDir dir;
  BudgetBook book(dir.path());
  Status huge_price = book.define("lab", 50.0, std::nullopt, h100_at(1e13), true, true);
  EXPECT_EQ(huge_price.code(), ErrorCode::invalid_request);
  EXPECT_THAT(huge_price.message(), HasSubstr("--prices: prices.gpu_hour.H100: expected a GPU type and a price from 0 to 1000000"));
  EXPECT_EQ(lines_of(book), 0) << "a refused define writes nothing";

  ASSERT_TRUE(book.define("lab", 50.0, std::nullopt, h100_at(kMaxPrice), true, true));
  std::int64_t before = lines_of(book);
  Ask ask = one_gpu_hour();
  ask.gpu_count = 8;
  ask.seconds = 1e13;  // at the bound's price: $2.2e16, beyond int64 in millionths
  auto refused = book.reserve(ask);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.status().code(), ErrorCode::resource_exhausted);
  EXPECT_THAT(refused.status().message(), HasSubstr("budget_exceeded: budget lab cannot hold this create's reservation"));
  EXPECT_THAT(refused.status().message(), HasSubstr("nothing was dispatched"));
  EXPECT_EQ(lines_of(book), before) << "nothing journaled";
  // Within int64 but past the ceiling: refused the same way, the sum checked.
  ask.seconds = 3600;
  auto past = book.reserve(ask);
  ASSERT_FALSE(past);
  EXPECT_THAT(past.status().message(), HasSubstr("budget_exceeded: budget lab (ceiling $50.00)"));
  EXPECT_EQ(lines_of(book), before);
  auto contents = book.read();
  ASSERT_TRUE(contents);
  for (const auto& entry : contents->entries) EXPECT_GE(entry.micro_usd, 0);
  EXPECT_EQ(Ledger::fold(contents->entries).budget("lab")->reserved_micro_usd, 0);
  // A ceiling beyond the bound is refused too.
  EXPECT_EQ(book.define("lab", 1e13, std::nullopt, std::nullopt, false, false).code(), ErrorCode::invalid_request);
}

TEST(BudgetBook, AnOperationInFlightIsSeenAsSuchUntilItLands) {
  test::TempDir dir;
  BudgetBook book(dir.path());
  ASSERT_TRUE(book.define("lab", 3.0, std::nullopt, h100_at(1.0), true, true));
  auto reserved = book.reserve(one_gpu_hour());
  ASSERT_TRUE(reserved && reserved->has_value());
  EXPECT_TRUE(InFlight::held_elsewhere(book.dir(), (*reserved)->id));
  (*reserved)->in_flight->done();
  EXPECT_FALSE(InFlight::held_elsewhere(book.dir(), (*reserved)->id));
}

TEST(BudgetBook, AJobThatOutlivesItsSandboxsReservationReservesTheRest) {
  test::TempDir dir;
  SandboxStore store(dir.path() + "/gpubox");
  BudgetBook book(store.root());
  ASSERT_TRUE(book.define("lab", 3.0, std::nullopt, h100_at(1.0), true, true));
  Ask create = one_gpu_hour();
  create.seconds = 600;
  auto reserved = book.reserve(create);
  ASSERT_TRUE(reserved && reserved->has_value());
  auto record = store.reserve("", {{"gpu", "H100"}, {"timeout_s", 600.0},
                                   {"budget", {{"name", "lab"}, {"reservation", (*reserved)->id}, {"priced", true},
                                               {"gpu_type", "H100"}, {"gpu_count", 1}}}});
  ASSERT_TRUE(record);
  record->backend = "modal";
  ASSERT_TRUE(book.confirm((*reserved)->id, record->id, "sb-1"));
  // Within the sandbox's 600 s: nothing more to hold.
  auto inside = reserve_for_job(store, *record, "", "job", 60, 0);
  ASSERT_TRUE(inside) << inside.status().to_string();
  EXPECT_FALSE(inside->has_value());
  // An hour-long job holds what runs past the sandbox's 600 s: about 3000 s more at $1/h.
  auto outliving = reserve_for_job(store, *record, "", "job", 3600, 0);
  ASSERT_TRUE(outliving) << outliving.status().to_string();
  ASSERT_TRUE(outliving->has_value());
  EXPECT_NEAR(static_cast<double>((*outliving)->micro_usd), 3000.0 / 3600 * 1e6, 2.0 / 3600 * 1e6);
  // Past the ceiling it is refused.
  auto refused = reserve_for_job(store, *record, "", "job", 4 * 3600, 0);
  ASSERT_FALSE(refused);
  EXPECT_THAT(refused.status().message(), HasSubstr("budget_exceeded: budget lab"));
  EXPECT_THAT(refused.status().message(), HasSubstr("this job's reservation"));
  // A pull holds its egress at the budget's price, whatever its time.
  Prices with_egress = h100_at(1.0);
  with_egress.egress_gib = 0.25;
  ASSERT_TRUE(book.define("lab", std::nullopt, std::nullopt, with_egress, false, false));
  auto pull = reserve_for_job(store, *record, "", "pull", 0, 2.0);
  ASSERT_TRUE(pull) << pull.status().to_string();
  ASSERT_TRUE(pull->has_value());
  EXPECT_EQ((*pull)->micro_usd, 500'000) << "2 GiB at $0.25";
  // When the sandbox ends after 700 s, each reservation is charged for its own stretch (the pull its egress).
  ASSERT_TRUE(book.settle_sandbox(record->id, 700.0, "terminated by gpubox"));
  auto contents = book.read();
  ASSERT_TRUE(contents);
  Ledger ledger = Ledger::fold(contents->entries);
  EXPECT_EQ(ledger.budget("lab")->reserved_micro_usd, 0);
  EXPECT_NEAR(static_cast<double>(ledger.budget("lab")->settled_micro_usd), 700.0 / 3600 * 1e6 + 500'000, 2);
}

}  // namespace
}  // namespace gpubox::host::budget
