// The hardened extractor: real archives round-trip and verify against a
// manifest; hostile ones are refused with an error naming the entry and rule,
// nothing is written outside the destination, and the destination is removed.
#include "base/safe_extractor.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

#include "base/sha256.h"
#include "tests/harvest/archive_builder.h"
#include "tests/unit/temp_dir.h"

namespace gpubox::harvest {
namespace {

using test::TarEntry;

std::string sha256_of(const std::string& bytes) {
  Sha256 hash;
  hash.update(bytes.data(), bytes.size());
  return hash.hex_digest();
}

bool exists(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

std::string read_whole(const std::string& path) { return test::TempDir::read_or_missing(path); }

struct ExtractorTest : ::testing::Test {
  test::TempDir dir;
  std::string dest() const { return dir.file("dest/inner"); }  // dest's parent is where escapes would land
  void SetUp() override { ASSERT_EQ(::mkdir(dir.file("dest").c_str(), 0755), 0); }

  Result<ExtractReport> extract(const std::vector<TarEntry>& entries, ExtractLimits limits = {}) {
    std::string bytes = test::build_tar(entries);
    return extract_archive_memory(bytes.data(), bytes.size(), dest(), limits);
  }

  // The refusal's message, after checking the destination is gone and nothing escaped.
  std::string refused(const std::vector<TarEntry>& entries, ExtractLimits limits = {}) {
    auto result = extract(entries, limits);
    EXPECT_FALSE(result.is_ok());
    EXPECT_FALSE(exists(dest())) << "a refused archive leaves no destination behind";
    EXPECT_FALSE(exists(dir.file("dest/evil"))) << "nothing escapes into the parent";
    EXPECT_FALSE(exists(dir.file("evil")));
    return result ? "" : result.status().message();
  }
};

TEST_F(ExtractorTest, ExtractsFilesDirsAndInsideLinksAndVerifiesTheManifest) {
  std::string big(2 << 20, 'x');
  auto report = extract({test::dir_entry("out"),
                         test::file_entry("out/sub/data.bin", big),
                         test::file_entry("out/a.txt", "alpha", 0600),
                         test::symlink_entry("out/link", "a.txt"),
                         test::symlink_entry("out/sub/up", "../a.txt"),
                         test::hardlink_entry("out/hard", "out/a.txt"),
                         test::file_entry("./stdout.log", "log\n")});
  ASSERT_TRUE(report) << report.status().message();
  EXPECT_EQ(report->files, 3u);
  EXPECT_EQ(report->symlinks, 2u);
  EXPECT_EQ(report->hardlinks, 1u);
  EXPECT_EQ(report->bytes, big.size() + 5 + 4);
  EXPECT_EQ(read_whole(dest() + "/out/sub/data.bin"), big);
  EXPECT_EQ(read_whole(dest() + "/out/sub/up"), "alpha") << "an inside link resolves inside";
  EXPECT_EQ(read_whole(dest() + "/out/hard"), "alpha");
  struct stat st;
  ASSERT_EQ(::stat((dest() + "/out/a.txt").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);

  nlohmann::json manifest = {{"files", {{{"path", "out/sub/data.bin"}, {"type", "file"}, {"size", big.size()}, {"sha256", sha256_of(big)}},
                                        {{"path", "stdout.log"}, {"type", "file"}, {"size", 4}, {"sha256", sha256_of("log\n")}}}}};
  EXPECT_TRUE(verify_manifest(dest(), manifest).is_ok());
  manifest["files"][1]["sha256"] = sha256_of("tampered");
  Status mismatch = verify_manifest(dest(), manifest);
  EXPECT_EQ(mismatch.code(), ErrorCode::input_changed);
  EXPECT_NE(mismatch.message().find("stdout.log"), std::string::npos);
}

TEST_F(ExtractorTest, RefusesAnExistingDestination) {
  ASSERT_EQ(::mkdir(dest().c_str(), 0755), 0);
  auto result = extract({test::file_entry("a", "x")});
  ASSERT_FALSE(result);
  EXPECT_EQ(result.status().code(), ErrorCode::already_exists);
}

TEST_F(ExtractorTest, RefusesAbsolutePaths) {
  std::string target = dir.file("evil");
  EXPECT_NE(refused({test::file_entry(target, "pwned")}).find("absolute path"), std::string::npos);
}

TEST_F(ExtractorTest, RefusesDotDotTarSlip) {
  EXPECT_NE(refused({test::file_entry("ok.txt", "fine"), test::file_entry("../evil", "pwned")}).find("\"..\""), std::string::npos);
  EXPECT_NE(refused({test::file_entry("a/b/../../../evil", "pwned")}).find("archive entry \"a/b/../../../evil\""), std::string::npos);
}

TEST_F(ExtractorTest, RefusesSymlinksPointingOutside) {
  EXPECT_NE(refused({test::symlink_entry("l", "/etc")}).find("symlink pointing outside"), std::string::npos);
  EXPECT_NE(refused({test::symlink_entry("sub/l", "../../evil")}).find("symlink pointing outside"), std::string::npos);
}

TEST_F(ExtractorTest, RefusesWritingThroughASymlink) {
  // "l" points inside, but a later entry through it must not be followed.
  std::string message = refused({test::dir_entry("real"), test::symlink_entry("l", "real"), test::file_entry("l/evil", "x")});
  EXPECT_NE(message.find("through a symlink"), std::string::npos) << message;
}

TEST_F(ExtractorTest, RefusesDeviceFilesAndFifos) {
  EXPECT_NE(refused({test::special_entry("null", AE_IFCHR)}).find("device file"), std::string::npos);
  EXPECT_NE(refused({test::special_entry("pipe", AE_IFIFO)}).find("FIFO"), std::string::npos);
}

TEST_F(ExtractorTest, RefusesSetuidAndSetgid) {
  EXPECT_NE(refused({test::file_entry("tool", "x", 04755)}).find("setuid or setgid"), std::string::npos);
  EXPECT_NE(refused({test::file_entry("tool", "x", 02755)}).find("setuid or setgid"), std::string::npos);
}

TEST_F(ExtractorTest, RefusesHardLinksToAnythingNotExtractedBefore) {
  EXPECT_NE(refused({test::hardlink_entry("h", "/etc/passwd")}).find("hard link"), std::string::npos);
  EXPECT_NE(refused({test::hardlink_entry("h", "../evil")}).find("hard link"), std::string::npos);
}

TEST_F(ExtractorTest, RefusesDecompressionBombsByTotalSize) {
  ExtractLimits limits;
  limits.max_total_bytes = 1 << 20;
  std::string zeros(8 << 20, '\0');  // zstd squeezes this to a few hundred bytes
  std::string bytes = test::build_tar({test::file_entry("bomb", zeros)});
  EXPECT_LT(bytes.size(), 4096u);
  auto result = extract_archive_memory(bytes.data(), bytes.size(), dest(), limits);
  ASSERT_FALSE(result);
  EXPECT_EQ(result.status().code(), ErrorCode::resource_exhausted);
  EXPECT_NE(result.status().message().find("decompression bomb"), std::string::npos);
  EXPECT_FALSE(exists(dest()));
  // Many small files add up to the same cap.
  std::vector<TarEntry> many;
  for (int i = 0; i < 20; ++i) many.push_back(test::file_entry("f" + std::to_string(i), std::string(100'000, 'z')));
  EXPECT_NE(refused(many, limits).find("expands to more than"), std::string::npos);
}

TEST_F(ExtractorTest, RefusesTooManyEntries) {
  ExtractLimits limits;
  limits.max_entries = 5;
  std::vector<TarEntry> many;
  for (int i = 0; i < 6; ++i) many.push_back(test::file_entry("f" + std::to_string(i), "x"));
  EXPECT_NE(refused(many, limits).find("more than 5 entries"), std::string::npos);
}

TEST_F(ExtractorTest, RefusesDuplicatesInsteadOfOverwriting) {
  EXPECT_NE(refused({test::file_entry("a", "first"), test::file_entry("a", "second")}).find("duplicate"), std::string::npos);
}

TEST_F(ExtractorTest, CorruptArchivesAreAClearError) {
  std::string bytes = test::build_tar({test::file_entry("a", std::string(100'000, 'q'))});
  bytes.resize(bytes.size() / 2);
  auto result = extract_archive_memory(bytes.data(), bytes.size(), dest(), {});
  ASSERT_FALSE(result);
  EXPECT_EQ(result.status().code(), ErrorCode::invalid_request);
  EXPECT_FALSE(exists(dest()));
  std::string garbage = "this is not an archive at all";
  result = extract_archive_memory(garbage.data(), garbage.size(), dest(), {});
  ASSERT_FALSE(result);
  EXPECT_FALSE(exists(dest()));
}

TEST(NormalizeEntryPath, AcceptsOnlySafeRelativePaths) {
  std::string normal;
  EXPECT_TRUE(normalize_entry_path("./out/a.txt", &normal));
  EXPECT_EQ(normal, "out/a.txt");
  EXPECT_TRUE(normalize_entry_path("out/dir/", &normal));
  EXPECT_EQ(normal, "out/dir");
  EXPECT_FALSE(normalize_entry_path("out/../x", &normal));
  EXPECT_FALSE(normalize_entry_path("out//x", &normal));
  EXPECT_FALSE(normalize_entry_path("..", &normal));
}

}  // namespace
}  // namespace gpubox::harvest
