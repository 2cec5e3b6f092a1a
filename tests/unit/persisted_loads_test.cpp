// What modeld keeps for a restart (model/modeld/registry/persisted_loads.h, FnSet::records):
// the records read back as written, private file modes, archives checked
// against their names and removed once no model names them, and damaged files
// or entries dropped naming the file and entry. Through a real gpubox-modeld
// killed and restarted: tests/model/modeld/test_modeld_persist.py.
#include "model/modeld/registry/persisted_loads.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cstdlib>
#include <fstream>
#include <string>

#include "base/sha256.h"
#include "model/modeld/interventions/fn_set.h"

namespace gpubox::modeld {
namespace {

const std::string kSession = "session-a-0123456789abcdef";

std::string sha256_of(const std::string& bytes) {
  Sha256 hash;
  hash.update(bytes.data(), bytes.size());
  return hash.hex_digest();
}

class PersistedLoadsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/persisted-loads-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    root_ = pattern;
    dir_ = root_ + "/modeld.json.loaded";
  }
  void TearDown() override { std::system(("rm -rf " + root_).c_str()); }
  static int mode(const std::string& path) {
    struct stat info {};
    return ::stat(path.c_str(), &info) == 0 ? static_cast<int>(info.st_mode & 07777) : -1;
  }
  void write(const std::string& path, const std::string& text) { std::ofstream(path) << text; }
  std::string joined(const std::vector<std::string>& lines) {
    std::string out;
    for (const auto& line : lines) out += line + "\n";
    return out;
  }
  std::string root_, dir_;
};

TEST_F(PersistedLoadsTest, WhatIsSavedIsReadBackByTheNextProcessInPrivateFiles) {
  std::string archive = "a TorchScript archive's bytes";
  std::string sha = sha256_of(archive);
  ModelLoads loads;
  loads.fns = {{"sha256:" + sha, kSession, false, sha}, {"sha256:" + sha, "", false, sha}, {"mine", kSession, false, sha},
               {"ours", kSession, true, sha}};
  loads.saes = {{"std", "/saes/std", "blocks.1.hook_resid_post"}};
  {
    PersistedLoads kept(dir_);
    ASSERT_TRUE(kept.enabled());
    EXPECT_TRUE(kept.dropped().empty()) << joined(kept.dropped());
    ASSERT_TRUE(kept.save("gpt2", loads, sha, archive));
  }
  EXPECT_EQ(mode(dir_), 0700);
  EXPECT_EQ(mode(dir_ + "/loaded.json"), 0600);
  EXPECT_EQ(mode(dir_ + "/" + sha + ".pt"), 0600);
  PersistedLoads again(dir_);
  EXPECT_TRUE(again.dropped().empty()) << joined(again.dropped());
  auto read = again.loads("gpt2");
  ASSERT_TRUE(read);
  EXPECT_EQ(read->fns, loads.fns);
  ASSERT_EQ(read->saes.size(), 1u);
  EXPECT_EQ(read->saes[0].name, "std");
  EXPECT_EQ(read->saes[0].path, "/saes/std");
  EXPECT_EQ(read->saes[0].hook, "blocks.1.hook_resid_post");
  EXPECT_FALSE(again.loads("llama"));
  auto bytes = again.read_archive(sha);
  ASSERT_TRUE(bytes) << bytes.status().message();
  EXPECT_EQ(*bytes, archive);
}

TEST_F(PersistedLoadsTest, AnArchiveNoModelNamesIsRemovedAndAForgottenModelIsGone) {
  std::string one = "archive one", two = "archive two";
  PersistedLoads kept(dir_);
  ASSERT_TRUE(kept.save("gpt2", {{{"a", kSession, false, sha256_of(one)}}, {}}, sha256_of(one), one));
  ASSERT_TRUE(kept.save("llama", {{{"b", kSession, false, sha256_of(two)}}, {}}, sha256_of(two), two));
  EXPECT_EQ(mode(dir_ + "/" + sha256_of(one) + ".pt"), 0600);
  ASSERT_TRUE(kept.save("gpt2", {}));  // gpt2's function unloaded
  EXPECT_EQ(mode(dir_ + "/" + sha256_of(one) + ".pt"), -1);
  EXPECT_EQ(mode(dir_ + "/" + sha256_of(two) + ".pt"), 0600);
  ASSERT_TRUE(kept.retain({"gpt2"}));  // llama is no longer in the models file
  EXPECT_FALSE(kept.loads("llama"));
  EXPECT_EQ(mode(dir_ + "/" + sha256_of(two) + ".pt"), -1);
  ASSERT_TRUE(kept.forget("gpt2"));
  EXPECT_FALSE(PersistedLoads(dir_).loads("gpt2"));
}

TEST_F(PersistedLoadsTest, ATruncatedArchiveIsRefusedNamingItsFile) {
  std::string archive = "the whole archive, longer than what is left of it";
  std::string sha = sha256_of(archive);
  PersistedLoads kept(dir_);
  ASSERT_TRUE(kept.save("gpt2", {{{"f", kSession, false, sha}}, {}}, sha, archive));
  ASSERT_EQ(::truncate((dir_ + "/" + sha + ".pt").c_str(), 10), 0);
  auto read = kept.read_archive(sha);
  ASSERT_FALSE(read);
  EXPECT_EQ(read.status().code(), ErrorCode::invalid_request);
  EXPECT_NE(read.status().message().find(dir_ + "/" + sha + ".pt: damaged: its 10 bytes hash to sha256:"), std::string::npos)
      << read.status().message();
  auto missing = kept.read_archive(std::string(64, 'c'));
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.status().message().find(dir_ + "/" + std::string(64, 'c') + ".pt"), std::string::npos);
}

TEST_F(PersistedLoadsTest, AFileThatIsNotJsonIsDroppedNamingItAndReplacedOnTheNextSave) {
  ASSERT_EQ(::mkdir(dir_.c_str(), 0700), 0);
  write(dir_ + "/loaded.json", "{\"models\": {\"gpt2\": {\"fns\": [");
  PersistedLoads kept(dir_);
  ASSERT_EQ(kept.dropped().size(), 1u);
  EXPECT_EQ(kept.dropped()[0], dir_ + "/loaded.json: damaged (not a JSON object {\"models\": {...}}); the functions and SAEs "
                                      "it kept are dropped");
  EXPECT_FALSE(kept.loads("gpt2"));
  ASSERT_TRUE(kept.retain({"gpt2"}));
  EXPECT_TRUE(PersistedLoads(dir_).dropped().empty());
}

TEST_F(PersistedLoadsTest, ABadEntryIsDroppedNamingItAndTheOthersAreKept) {
  ASSERT_EQ(::mkdir(dir_.c_str(), 0700), 0);
  std::string sha(64, 'a');
  write(dir_ + "/loaded.json", R"({"models": {"gpt2": {"fns": [
      {"name": "mine", "session": ")" + kSession + R"(", "shared": false, "sha256": ")" + sha + R"("},
      {"name": "nobody's", "session": "", "shared": false, "sha256": ")" + sha + R"("},
      {"name": "sha256:)" + std::string(64, 'b') + R"(", "session": "", "shared": false, "sha256": ")" + sha + R"("},
      {"name": "short", "session": ")" + kSession + R"(", "shared": false, "sha256": "abc"}],
    "saes": [{"name": "std", "path": "relative"}, {"name": "jump", "path": "/saes/jump"}]}}})");
  PersistedLoads kept(dir_);
  std::string file = dir_ + "/loaded.json";
  ASSERT_EQ(kept.dropped().size(), 4u) << joined(kept.dropped());
  EXPECT_EQ(kept.dropped()[0].rfind(file + ": models.gpt2.fns[1]: params.session: a name you choose", 0), 0u) << kept.dropped()[0];
  EXPECT_EQ(kept.dropped()[1].rfind(file + ": models.gpt2.fns[2]: params.name: \"sha256:bbbb", 0), 0u) << kept.dropped()[1];
  EXPECT_EQ(kept.dropped()[2], file + ": models.gpt2.fns[3]: \"sha256\" must be 64 lower-case hex digits; dropped");
  EXPECT_EQ(kept.dropped()[3].rfind(file + ": models.gpt2.saes[0]: \"path\" must be an absolute path", 0), 0u) << kept.dropped()[3];
  auto read = kept.loads("gpt2");
  ASSERT_TRUE(read);
  ASSERT_EQ(read->fns.size(), 1u);
  EXPECT_EQ(read->fns[0].name, "mine");
  ASSERT_EQ(read->saes.size(), 1u);
  EXPECT_EQ(read->saes[0].name, "jump");
}

TEST_F(PersistedLoadsTest, APlaceThatIsNotADirectoryKeepsNothingAndSaysWhy) {
  write(dir_, "a file where the directory goes");
  PersistedLoads kept(dir_);
  EXPECT_FALSE(kept.enabled());
  ASSERT_EQ(kept.dropped().size(), 1u);
  EXPECT_EQ(kept.dropped()[0], dir_ + ": cannot be modeld's private directory (not a directory of modeld's own); functions and "
                                      "SAEs loaded now are not kept for a restart");
  EXPECT_TRUE(kept.save("gpt2", {}));  // nothing written
}

// A set's records load an equal set again: every name, its scope and who holds it.
std::array<char, 1> token;
FnEntry entry(const std::string& sha256) {
  return {std::shared_ptr<const UserFn>(std::shared_ptr<void>(), reinterpret_cast<const UserFn*>(&token[0])), sha256, 10};
}

TEST(FnSetRecords, TheRecordsOfASetLoadAnEqualSet) {
  const std::string other = "session-b-0123456789abcdef";
  const std::string sha(64, 'a');
  FnSet set;
  ASSERT_TRUE(set.add("sha256:" + sha, kSession, false, entry(sha)));
  ASSERT_TRUE(set.add("sha256:" + sha, "", false, entry(sha)));
  ASSERT_TRUE(set.add("mine", kSession, false, entry(sha)));
  ASSERT_TRUE(set.add("ours", other, true, entry(sha)));
  auto records = set.records();
  EXPECT_EQ(records.size(), 4u);
  FnSet again;
  for (const auto& r : records) ASSERT_TRUE(again.add(r.name, r.session, r.shared, entry(r.sha256)));
  EXPECT_EQ(again.records(), records);
  EXPECT_EQ(again.list(kSession), set.list(kSession));
  EXPECT_EQ(again.list(other), set.list(other));
  EXPECT_EQ(again.list(""), set.list(""));
  EXPECT_FALSE(again.remove("ours", kSession));  // still only its owner's to unload
  EXPECT_TRUE(again.remove("ours", other));
}

}  // namespace
}  // namespace gpubox::modeld
