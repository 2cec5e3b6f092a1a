// The fn op's registry of names (model/modeld/interventions/fn_set.h) and the caps on what
// callers load into a model (load_cap.h): content names checked against the
// archive, names per session, shared names and their owner, holds on content
// names, and the refusals, each naming what was refused and why. The same
// rules through a real gpubox-modeld: tests/model/modeld/test_modeld_fn.py.
#include "model/modeld/interventions/fn_set.h"

#include <gtest/gtest.h>

#include <array>
#include <string>

namespace gpubox::modeld {
namespace {

const std::string kA = "session-a-0123456789abcdef";
const std::string kB = "session-b-0123456789abcdef";
const std::string kHashA(64, 'a');
const std::string kHashB(64, 'b');

// A function stands in by address alone: the set never calls or dereferences one.
std::array<char, 2> tokens;
FnEntry entry(int which, const std::string& sha256, std::size_t bytes = 100) {
  return {std::shared_ptr<const UserFn>(std::shared_ptr<void>(), reinterpret_cast<const UserFn*>(&tokens[which])), sha256, bytes};
}
const UserFn* fn(int which) { return reinterpret_cast<const UserFn*>(&tokens[which]); }

const UserFn* found(const FnSet& set, const std::string& name, const std::string& session) {
  auto got = set.find(name, session, "params.ops[0].fn");
  return got ? got->get() : nullptr;
}

TEST(FnSet, AContentNameIsTheArchivesHashOrRefusedNamingTheActualOne) {
  FnSet set;
  auto forged = set.add("sha256:" + kHashB, kA, false, entry(0, kHashA));
  ASSERT_FALSE(forged);
  EXPECT_EQ(forged.status().code(), ErrorCode::invalid_request);
  EXPECT_NE(forged.status().message().find("\"sha256:" + kHashB + "\" is not this archive's content name"), std::string::npos);
  EXPECT_NE(forged.status().message().find("hashes to sha256:" + kHashA), std::string::npos);
  auto short_hash = set.add("sha256:abc", kA, false, entry(0, kHashA));
  ASSERT_FALSE(short_hash);
  EXPECT_NE(short_hash.status().message().find("64 lower-case hex digits"), std::string::npos);
  EXPECT_EQ(set.list(kA).size(), 0u) << "a refusal changes nothing";
  auto loaded = set.add("sha256:" + kHashA, kA, false, entry(0, kHashA));
  ASSERT_TRUE(loaded) << loaded.status().message();
  EXPECT_EQ((*loaded)["sha256"], kHashA);
  EXPECT_EQ((*loaded)["scope"], "content");
}

TEST(FnSet, ContentNamesAreEveryCallersAndStayWhileAnySessionHoldsThem) {
  FnSet set;
  std::string name = "sha256:" + kHashA;
  ASSERT_TRUE(set.add(name, kA, false, entry(0, kHashA)));
  ASSERT_TRUE(set.add(name, kB, false, entry(1, kHashA)));  // the same content: B holds it too, A's stays
  EXPECT_EQ(found(set, name, kB), fn(0));
  EXPECT_EQ(found(set, name, ""), fn(0)) << "any call may name content";
  ASSERT_TRUE(set.remove(name, kB));
  EXPECT_EQ(found(set, name, kA), fn(0)) << "B's unload ends B's hold, not A's";
  Status again = set.remove(name, kB);
  EXPECT_EQ(again.code(), ErrorCode::permission_denied);
  EXPECT_NE(again.message().find("held by other sessions"), std::string::npos) << again.message();
  ASSERT_TRUE(set.remove(name, kA));
  EXPECT_EQ(found(set, name, kA), nullptr);
}

TEST(FnSet, ChosenNamesArePerSession) {
  FnSet set;
  ASSERT_TRUE(set.add("steer", kA, false, entry(0, kHashA)));
  ASSERT_TRUE(set.add("steer", kB, false, entry(1, kHashB))) << "B's own name, beside A's";
  EXPECT_EQ(found(set, "steer", kA), fn(0));
  EXPECT_EQ(found(set, "steer", kB), fn(1));
  auto missing = set.find("steer", "", "params.ops[2].fn");
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.status().message().find("params.ops[2].fn: no function \"steer\""), std::string::npos);
  EXPECT_NE(missing.status().message().find("per session"), std::string::npos);
  auto taken = set.add("steer", kA, false, entry(1, kHashB));
  ASSERT_FALSE(taken);
  EXPECT_EQ(taken.status().code(), ErrorCode::already_exists);
  EXPECT_NE(taken.status().message().find("sha256:" + kHashA), std::string::npos) << "names what is loaded: " << taken.status().message();
  ASSERT_TRUE(set.remove("steer", kB));
  EXPECT_EQ(found(set, "steer", kA), fn(0)) << "B unloads its own, never A's";
  Status gone = set.remove("steer", kB);
  EXPECT_EQ(gone.code(), ErrorCode::not_found);
  EXPECT_NE(gone.message().find("names are per session"), std::string::npos) << gone.message();
  EXPECT_EQ(set.list(kB).size(), 0u);
  ASSERT_EQ(set.list(kA).size(), 1u);
  EXPECT_EQ(set.list(kA)[0]["scope"], "session");
}

TEST(FnSet, AChosenNameNeedsASession) {
  FnSet set;
  auto refused = set.add("steer", "", false, entry(0, kHashA));
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.status().code(), ErrorCode::invalid_request);
  EXPECT_NE(refused.status().message().find("params.session"), std::string::npos);
  EXPECT_NE(refused.status().message().find("sha256:" + kHashA), std::string::npos) << "offers the content name";
  EXPECT_TRUE(check_session(""));
  EXPECT_TRUE(check_session(kA));
  EXPECT_FALSE(check_session("short"));
  EXPECT_FALSE(check_session("has a space in it, sixteen+"));
}

TEST(FnSet, SharedNamesAreSeenByAllAndUnloadedByTheirOwnerOnly) {
  FnSet set;
  auto shared = set.add("probe", kA, true, entry(0, kHashA));
  ASSERT_TRUE(shared);
  EXPECT_EQ((*shared)["scope"], "shared");
  EXPECT_EQ(found(set, "probe", kB), fn(0));
  EXPECT_EQ(found(set, "probe", ""), fn(0));
  auto replace = set.add("probe", kB, true, entry(1, kHashB));
  ASSERT_FALSE(replace);
  EXPECT_EQ(replace.status().code(), ErrorCode::already_exists);
  Status taken = set.remove("probe", kB);
  EXPECT_EQ(taken.code(), ErrorCode::permission_denied);
  EXPECT_NE(taken.message().find("only that session can unload it"), std::string::npos);
  ASSERT_TRUE(set.add("probe", kB, false, entry(1, kHashB))) << "B's own name shadows the shared one for B";
  EXPECT_EQ(found(set, "probe", kB), fn(1));
  EXPECT_EQ(found(set, "probe", kA), fn(0));
  ASSERT_TRUE(set.remove("probe", kA));
  EXPECT_EQ(found(set, "probe", ""), nullptr);
}

TEST(FnSet, TheCapsRefuseNamingTheCapAndHowToMakeRoom) {
  FnSet set(LoadCap{"functions", 2, 250, "model.fn_unload", "model.fns"});
  ASSERT_TRUE(set.add("one", kA, false, entry(0, kHashA)));
  auto too_big = set.add("big", kA, false, entry(1, kHashB, 151));
  ASSERT_FALSE(too_big);
  EXPECT_EQ(too_big.status().code(), ErrorCode::resource_exhausted);
  EXPECT_EQ(too_big.status().message(), "this model holds 100 bytes of functions; 151 bytes more would pass the cap of 2 functions "
                                        "and 250 bytes per model; model.fn_unload one (model.fns lists them) to make room");
  ASSERT_TRUE(set.add("two", kB, false, entry(1, kHashB)));
  auto third = set.add("three", kA, false, entry(1, kHashB, 1));
  ASSERT_FALSE(third);
  EXPECT_EQ(third.status().message(), "this model holds 2 functions: the cap is 2 functions and 250 bytes per model; "
                                      "model.fn_unload one (model.fns lists them) to make room");
  EXPECT_EQ(set.list(kA).size(), 1u) << "refusals change nothing";
  ASSERT_TRUE(set.add("sha256:" + kHashA, kA, false, entry(0, kHashA)).status().code() == ErrorCode::resource_exhausted);
  ASSERT_TRUE(set.remove("one", kA));
  EXPECT_TRUE(set.add("three", kA, false, entry(1, kHashB, 1)));
}

TEST(LoadCap, ByteSizesReadAsPeopleWriteThem) {
  EXPECT_EQ(byte_size(12), "12 bytes");
  EXPECT_EQ(byte_size(std::size_t{1} << 30), "1 GiB");
  EXPECT_EQ(byte_size(std::size_t{32} << 30), "32 GiB");
  EXPECT_EQ(byte_size(1536 * 1024), "1.5 MiB");
  EXPECT_EQ(sae_cap().admits(64, 0, 0).code(), ErrorCode::resource_exhausted);
  EXPECT_TRUE(sae_cap().admits(63, (std::size_t{32} << 30) - 1, 1));
  EXPECT_FALSE(function_cap().admits(0, 0, (std::size_t{1} << 30) + 1));
}

}  // namespace
}  // namespace gpubox::modeld
