// stage_outputs(): a real tar + zstd archive, read back with libarchive, whose
// manifest matches its content; special files and a full disk are named.
#include "base/stager.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <map>
#include <random>

#include "base/sha256.h"
#include "tests/unit/temp_dir.h"
#include "tests/prerequisite.h"

namespace gpubox::jobs {
namespace {

std::string sha256_of(const std::string& bytes) {
  Sha256 hash;
  hash.update(bytes.data(), bytes.size());
  return hash.hex_digest();
}

std::string random_bytes(std::size_t size, unsigned seed) {
  std::mt19937_64 generator(seed);
  std::string bytes(size, '\0');
  for (auto& c : bytes) c = static_cast<char>(generator());
  return bytes;
}

// Every entry of a tar.zst: path → content (files), "->target" (symlinks), "<dir>".
std::map<std::string, std::string> read_archive(const std::string& path) {
  std::map<std::string, std::string> entries;
  struct archive* a = archive_read_new();
  archive_read_support_filter_zstd(a);
  archive_read_support_format_tar(a);
  EXPECT_EQ(archive_read_open_filename(a, path.c_str(), 1 << 16), ARCHIVE_OK) << archive_error_string(a);
  archive_entry* entry;
  while (archive_read_next_header(a, &entry) == ARCHIVE_OK) {
    std::string name = archive_entry_pathname(entry);
    if (!name.empty() && name.back() == '/') name.pop_back();
    if (archive_entry_filetype(entry) == AE_IFDIR) {
      entries[name] = "<dir>";
    } else if (archive_entry_filetype(entry) == AE_IFLNK) {
      entries[name] = std::string("->") + archive_entry_symlink(entry);
    } else {
      std::string content;
      char buffer[1 << 16];
      la_ssize_t n;
      while ((n = archive_read_data(a, buffer, sizeof buffer)) > 0) content.append(buffer, static_cast<std::size_t>(n));
      entries[name] = content;
    }
  }
  archive_read_free(a);
  return entries;
}

std::string read_whole(const std::string& path) { return test::TempDir::read_or_missing(path); }

struct StagerTest : ::testing::Test {
  test::TempDir dir;
  StageRequest request() {
    StageRequest r;
    r.out_dir = dir.file("out");
    r.stdout_log = dir.file("stdout.log");
    r.stderr_log = dir.file("stderr.log");
    r.archive_path = dir.file("archive.tar.zst");
    return r;
  }
};

TEST_F(StagerTest, ArchivesOutAndLogsWithAManifestThatMatches) {
  ASSERT_EQ(::mkdir(dir.file("out").c_str(), 0755), 0);
  ASSERT_EQ(::mkdir(dir.file("out/sub").c_str(), 0755), 0);
  ASSERT_EQ(::mkdir(dir.file("out/empty").c_str(), 0755), 0);
  std::string big = random_bytes(3 << 20, 1);
  dir.write("out/sub/big.bin", big);
  dir.write("out/a.txt", "alpha\n");
  dir.write("out/empty.txt", "");
  ASSERT_EQ(::symlink("a.txt", dir.file("out/link").c_str()), 0);
  ASSERT_EQ(::chmod(dir.file("out/a.txt").c_str(), 04755), 0);
  dir.write("stdout.log", "hello\n");
  dir.write("stderr.log", "oops\n");

  StageOutcome outcome = stage_outputs(request());
  ASSERT_TRUE(outcome.summary.archive_written) << outcome.summary.error;
  EXPECT_TRUE(outcome.summary.missing.empty());
  EXPECT_EQ(outcome.summary.output_files, (std::vector<std::string>{"a.txt", "empty.txt", "sub/big.bin"}));

  std::string archive = read_whole(dir.file("archive.tar.zst"));
  EXPECT_EQ(outcome.manifest.archive_size, archive.size());
  EXPECT_EQ(outcome.manifest.archive_sha256, sha256_of(archive));
  EXPECT_LT(archive.size(), big.size() + 64 * 1024) << "random data does not grow much";

  auto entries = read_archive(dir.file("archive.tar.zst"));
  EXPECT_EQ(entries["out/sub/big.bin"], big);
  EXPECT_EQ(entries["out/a.txt"], "alpha\n");
  EXPECT_EQ(entries["out/empty"], "<dir>");
  EXPECT_EQ(entries["out/link"], "->a.txt");
  EXPECT_EQ(entries["stdout.log"], "hello\n");
  EXPECT_EQ(entries["stderr.log"], "oops\n");
  int files = 0;
  for (const auto& entry : outcome.manifest.entries) {
    if (entry.type != "file") continue;
    ++files;
    ASSERT_TRUE(entries.count(entry.path)) << entry.path;
    EXPECT_EQ(entry.size, entries[entry.path].size()) << entry.path;
    EXPECT_EQ(entry.sha256, sha256_of(entries[entry.path])) << entry.path;
  }
  EXPECT_EQ(files, 5);
  auto json = outcome.manifest.to_json();
  EXPECT_EQ(Manifest::from_json(json).to_json(), json);
}

TEST_F(StagerTest, NamesBeyondAsciiAreArchivedByteForByte) {
  ASSERT_EQ(::mkdir(dir.file("out").c_str(), 0755), 0);
  const std::string utf8 = "caf\xC3\xA9.txt", not_utf8 = "raw\xFF\xFE.bin";
  dir.write("out/" + utf8, "accented\n");
  dir.write("out/" + not_utf8, "bytes\n");
  ASSERT_EQ(::symlink(utf8.c_str(), dir.file("out/link-\xE2\x82\xAC").c_str()), 0);
  dir.write("stdout.log", "");
  dir.write("stderr.log", "");
  StageOutcome outcome = stage_outputs(request());
  ASSERT_TRUE(outcome.summary.archive_written) << outcome.summary.error;
  EXPECT_TRUE(outcome.summary.missing.empty());
  auto entries = read_archive(dir.file("archive.tar.zst"));
  EXPECT_EQ(entries["out/" + utf8], "accented\n");
  EXPECT_EQ(entries["out/" + not_utf8], "bytes\n");
  EXPECT_EQ(entries["out/link-\xE2\x82\xAC"], "->" + utf8);
}

TEST_F(StagerTest, ArchivedModesLoseSetuidBits) {
  ASSERT_EQ(::mkdir(dir.file("out").c_str(), 0755), 0);
  dir.write("out/tool", "#!/bin/sh\n");
  ASSERT_EQ(::chmod(dir.file("out/tool").c_str(), 06755), 0);
  ASSERT_TRUE(stage_outputs(request()).summary.archive_written);
  struct archive* a = archive_read_new();
  archive_read_support_filter_zstd(a);
  archive_read_support_format_tar(a);
  ASSERT_EQ(archive_read_open_filename(a, dir.file("archive.tar.zst").c_str(), 1 << 16), ARCHIVE_OK);
  archive_entry* entry;
  bool found = false;
  while (archive_read_next_header(a, &entry) == ARCHIVE_OK) {
    if (std::string(archive_entry_pathname(entry)) == "out/tool") {
      found = true;
      EXPECT_EQ(archive_entry_mode(entry) & 07777, 0755u);
    }
  }
  archive_read_free(a);
  EXPECT_TRUE(found);
}

TEST_F(StagerTest, MissingOutStillArchivesTheLogs) {
  dir.write("stdout.log", "only logs\n");
  StageOutcome outcome = stage_outputs(request());
  ASSERT_TRUE(outcome.summary.archive_written);
  EXPECT_TRUE(outcome.summary.output_files.empty());
  EXPECT_EQ(read_archive(dir.file("archive.tar.zst"))["stdout.log"], "only logs\n");
}

TEST_F(StagerTest, SpecialFilesAreNamedAsMissing) {
  ASSERT_EQ(::mkdir(dir.file("out").c_str(), 0755), 0);
  ASSERT_EQ(::mkfifo(dir.file("out/pipe").c_str(), 0644), 0);
  dir.write("out/ok.txt", "ok");
  StageOutcome outcome = stage_outputs(request());
  ASSERT_TRUE(outcome.summary.archive_written);
  ASSERT_EQ(outcome.summary.missing.size(), 1u);
  EXPECT_EQ(outcome.summary.missing[0].rfind("out/pipe: not a regular file", 0), 0u) << outcome.summary.missing[0];
  EXPECT_EQ(read_archive(dir.file("archive.tar.zst"))["out/ok.txt"], "ok");
}

TEST_F(StagerTest, FullStagingDiskKeepsTheLogsAndNamesEveryMissingFile) {
  ASSERT_EQ(::mkdir(dir.file("small").c_str(), 0755), 0);
  if (::mount("tmpfs", dir.file("small").c_str(), "tmpfs", 0, "size=512k") != 0) {
    GPUBOX_MISSING("cannot mount a tmpfs (needs root): " << std::strerror(errno));
  }
  struct Unmount {
    std::string path;
    ~Unmount() { ::umount2(path.c_str(), MNT_DETACH); }
  } unmount{dir.file("small")};
  ASSERT_EQ(::mkdir(dir.file("out").c_str(), 0755), 0);
  dir.write("out/huge.bin", random_bytes(2 << 20, 2));
  dir.write("out/other.bin", random_bytes(1 << 20, 3));
  dir.write("stdout.log", "the log survives\n");
  StageRequest r = request();
  r.archive_path = dir.file("small/archive.tar.zst");
  StageOutcome outcome = stage_outputs(r);
  EXPECT_TRUE(outcome.summary.disk_full);
  EXPECT_TRUE(outcome.summary.archive_written) << "the logs alone fit: " << outcome.summary.error;
  ASSERT_EQ(outcome.summary.missing.size(), 2u);
  EXPECT_NE(outcome.summary.missing[0].find("out/huge.bin: not archived, the staging disk is full"), std::string::npos)
      << outcome.summary.missing[0];
  EXPECT_NE(outcome.summary.missing[1].find("out/other.bin"), std::string::npos);
  EXPECT_EQ(read_archive(r.archive_path)["stdout.log"], "the log survives\n");
  EXPECT_EQ(::access((r.archive_path + ".partial").c_str(), F_OK), -1) << "no partial archive left behind";
}

}  // namespace
}  // namespace gpubox::jobs
