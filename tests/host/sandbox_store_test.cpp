// host/sandbox_store.h and host/process_identity.h: records, names, lookup by
// id, name or prefix, and telling a live agent from a dead or reused pid.
#include "host/sandbox_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>

#include "tests/unit/temp_dir.h"
#include "host/sandboxes/state.h"

namespace gpubox::host {
namespace {

using ::testing::HasSubstr;

TEST(ProcessIdentity, TellsALiveProcessFromAReusedPidAndAZombie) {
  auto own = process_start_time(::getpid());
  ASSERT_TRUE(own.has_value());
  EXPECT_TRUE(process_alive({::getpid(), *own}));
  EXPECT_FALSE(process_alive({::getpid(), *own + 1})) << "another start time is another process";
  EXPECT_FALSE(process_alive({0, 0}));
  EXPECT_FALSE(process_start_time(4'194'304 + 1).has_value());

  pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  auto started = process_start_time(child);
  // Wait until the child is a zombie (exited, not reaped).
  for (int i = 0; i < 1000 && process_alive({child, started.value_or(0)}); ++i) ::usleep(1000);
  EXPECT_TRUE(process_start_time(child).has_value()) << "a zombie still has a /proc entry";
  EXPECT_FALSE(process_alive({child, started.value_or(0)})) << "a zombie is not alive";
  ::waitpid(child, nullptr, 0);
}

TEST(SandboxStore, ReservesWithPrivateModesAndResolvesByIdNameAndPrefix) {
  test::TempDir dir;
  SandboxStore store(dir.path() + "/gpubox");
  auto first = store.reserve("alpha", {{"network", "none"}});
  ASSERT_TRUE(first) << first.status().to_string();
  EXPECT_EQ(first->id.size(), 12u);
  EXPECT_EQ(sandbox_state(*first), "creating");
  EXPECT_EQ(first->endpoint, "ipc://" + first->dir + "/agent/rpc.sock");
  struct stat st {};
  ASSERT_EQ(::stat((first->dir + "/sandbox.json").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(::stat(first->dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  ASSERT_EQ(::stat(first->agent_dir().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);

  auto second = store.reserve("", {});
  ASSERT_TRUE(second);
  EXPECT_NE(first->id, second->id);

  EXPECT_EQ(store.resolve("alpha")->id, first->id);
  EXPECT_EQ(store.resolve(first->id)->name, "alpha");
  EXPECT_EQ(store.resolve(second->id.substr(0, 8))->id, second->id);
  EXPECT_EQ(store.resolve(first->id)->spec["network"], "none");
  auto missing = store.resolve("beta");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.status().code(), ErrorCode::not_found);
  EXPECT_THAT(missing.status().message(), HasSubstr("no sandbox with id or name 'beta'"));
  EXPECT_FALSE(store.resolve("../x"));
  EXPECT_FALSE(store.resolve(""));

  auto listed = store.list();
  ASSERT_EQ(listed.size(), 2u);
  EXPECT_EQ(listed[0].id, first->id) << "oldest first";

  ASSERT_TRUE(store.remove(*first));
  EXPECT_FALSE(std::filesystem::exists(first->dir));
  EXPECT_FALSE(store.resolve("alpha"));
}

TEST(SandboxStore, AmbiguousPrefixAndTakenOrBadNames) {
  test::TempDir dir;
  SandboxStore store(dir.path() + "/gpubox");
  auto taken = store.reserve("box", {});
  ASSERT_TRUE(taken);
  auto again = store.reserve("box", {});
  ASSERT_FALSE(again);
  EXPECT_EQ(again.status().code(), ErrorCode::already_exists);
  for (const char* bad : {"has space", "-dash-first", "slash/name", ".hidden"}) {
    auto refused = store.reserve(bad, {});
    ASSERT_FALSE(refused) << bad;
    EXPECT_EQ(refused.status().code(), ErrorCode::invalid_request) << bad;
  }
  EXPECT_EQ(store.list().size(), 1u) << "a refused reserve left a directory";
  // Every id starts with one of 16 digits: with 17 sandboxes, some prefix of one digit is ambiguous.
  for (int i = 0; i < 16; ++i) ASSERT_TRUE(store.reserve("", {}));
  bool found_ambiguous = false;
  for (char digit : std::string("0123456789abcdef")) {
    auto result = store.resolve(std::string(1, digit));
    if (!result && result.status().code() == ErrorCode::invalid_request) {
      EXPECT_THAT(result.status().message(), HasSubstr("give more of the id"));
      found_ambiguous = true;
    }
  }
  EXPECT_TRUE(found_ambiguous);
}

TEST(SandboxStore, RecordsSurviveARoundTripAndRemoveStaysInTheStore) {
  test::TempDir dir;
  SandboxStore store(dir.path() + "/gpubox");
  auto record = store.reserve("", {});
  ASSERT_TRUE(record);
  record->agent = {::getpid(), process_start_time(::getpid()).value()};
  ASSERT_TRUE(store.save(*record));
  auto loaded = store.resolve(record->id);
  ASSERT_TRUE(loaded);
  EXPECT_EQ(loaded->agent.pid, ::getpid());
  EXPECT_EQ(sandbox_state(*loaded), "running");
  loaded->agent.start_time += 1;
  EXPECT_EQ(sandbox_state(*loaded), "dead");
  SandboxRecord outside = *record;
  outside.dir = dir.path();
  EXPECT_FALSE(store.remove(outside)) << "remove must refuse a directory outside the store";
  EXPECT_TRUE(std::filesystem::exists(dir.path()));
}

}  // namespace
}  // namespace gpubox::host
