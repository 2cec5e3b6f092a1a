// `gpubox budget` and `gpubox budget reconcile` (host/cli/budget.cpp) run in
// this process against a real journal in a temp store, their stdout and
// stderr captured: a reservation id from a hostile journal (OSC retitle,
// clear screen, bidi overrides) reaches the terminal escaped.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <sstream>

#include "host/budget/book.h"
#include "host/cli/cli.h"
#include "tests/unit/temp_dir.h"

namespace gpubox::host::cli {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// What fn printed on fd (1 or 2), read back from a file it was redirected to.
std::string captured(int fd, const std::function<void()>& fn, const test::TempDir& dir) {
  std::string path = dir.file("captured-" + std::to_string(fd));
  std::fflush(nullptr);
  int saved = ::dup(fd);
  int file = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  ::dup2(file, fd);
  ::close(file);
  fn();
  std::fflush(nullptr);
  ::dup2(saved, fd);
  ::close(saved);
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// No byte of a terminal control (C0 but newline, DEL, C1 as UTF-8) nor a bidi control's UTF-8.
bool terminal_safe(const std::string& text) {
  for (unsigned char c : text) {
    if ((c < 0x20 && c != '\n') || c == 0x7f) return false;
  }
  for (const char* bidi : {"\u202e", "\u2066", "\u200f", "\xc2\x9b"}) {
    if (text.find(bidi) != std::string::npos) return false;
  }
  return true;
}

class BudgetCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* old = std::getenv("XDG_STATE_HOME");
    if (old) saved_ = old;
    had_ = old != nullptr;
    ::setenv("XDG_STATE_HOME", dir_.path().c_str(), 1);
  }
  void TearDown() override {
    if (had_) {
      ::setenv("XDG_STATE_HOME", saved_.c_str(), 1);
    } else {
      ::unsetenv("XDG_STATE_HOME");
    }
  }
  std::string store_root() const {
    auto store = SandboxStore::open_default();
    EXPECT_TRUE(store) << store.status().to_string();
    return store ? store->root() : "";
  }
  test::TempDir dir_;
  std::string saved_;
  bool had_ = false;
};

TEST_F(BudgetCliTest, AHostileReservationIdIsPrintedEscapedByBudgetAndReconcile) {
  budget::BudgetBook book(store_root());
  ASSERT_TRUE(book.define("lab", std::nullopt, 10.0, std::nullopt, true, true));
  // A reserve line gpubox never wrote: its id retitles the window, clears it and reverses what follows.
  const std::string id = "r-\x1b]0;owned\x07\x1b[2J\u202e\u2066\u200f\xc2\x9b" "31m";
  budget::JournalEntry hostile;
  hostile.op = "reserve";
  hostile.time = 1;
  hostile.budget = "lab";
  hostile.reservation = id;
  hostile.kind = "create";
  hostile.backend = "local";
  hostile.micro_gpu_h = 1'000'000;
  hostile.seconds = 3600;
  std::ofstream(book.journal_path(), std::ios::app) << hostile.to_json().dump() << "\n";

  Global global;
  int code = -1;
  std::string shown = captured(1, [&] { code = run_budget({}, global); }, dir_);
  EXPECT_EQ(code, kExitOk);
  EXPECT_THAT(shown, HasSubstr("r-\\x1b]0;owned\\x07\\x1b[2J\\u202e\\u2066\\u200f\\u009b31m  lab"));
  EXPECT_TRUE(terminal_safe(shown)) << shown;

  std::string reconciled = captured(1, [&] { code = run_budget({"reconcile"}, global); }, dir_);
  EXPECT_EQ(code, kExitOk);
  EXPECT_THAT(reconciled, HasSubstr("r-\\x1b]0;owned\\x07\\x1b[2J\\u202e\\u2066\\u200f\\u009b31m  lab  settled:"));
  EXPECT_TRUE(terminal_safe(reconciled)) << reconciled;

  // An error that quotes what the user typed is escaped too (stderr).
  std::string error = captured(2, [&] { code = run_budget({"\x1b[2Jnope\u202e"}, global); }, dir_);
  EXPECT_EQ(code, kExitUsage);
  EXPECT_THAT(error, HasSubstr("unknown subcommand '\\x1b[2Jnope\\u202e'"));
  EXPECT_TRUE(terminal_safe(error)) << error;
}

}  // namespace
}  // namespace gpubox::host::cli
