// Replays fuzz_extract's seed corpus (real and hostile archives) through the
// fuzz target itself, so its invariants hold in every ordinary test run, and
// checks that each seed is extracted or refused as its name says.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "base/safe_extractor.h"
#include "tests/unit/temp_dir.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace gpubox::harvest {
namespace {

std::string corpus_dir() { return std::string(GPUBOX_SOURCE_DIR) + "/tests/fuzz/corpus/fuzz_extract"; }

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::string bytes;
  char buffer[4096];
  while (in.read(buffer, sizeof buffer) || in.gcount() > 0) bytes.append(buffer, static_cast<std::size_t>(in.gcount()));
  return bytes;
}

TEST(ExtractCorpus, EverySeedSurvivesTheFuzzTargetsInvariants) {
  int seeds = 0;
  for (const auto& entry : std::filesystem::directory_iterator(corpus_dir())) {
    std::string bytes = read_bytes(entry.path().string());
    EXPECT_EQ(LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size()), 0) << entry.path();
    ++seeds;
  }
  EXPECT_GE(seeds, 10);
}

TEST(ExtractCorpus, RealArchivesExtractAndHostileOnesAreRefused) {
  for (const auto& entry : std::filesystem::directory_iterator(corpus_dir())) {
    std::string name = entry.path().filename().string();
    std::string bytes = read_bytes(entry.path().string());
    test::TempDir dir;
    auto result = extract_archive_memory(bytes.data(), bytes.size(), dir.file("dest"), ExtractLimits{8 << 20, 1000});
    bool should_extract = name.rfind("seed-job-archive", 0) == 0 || name == "seed-hardlink-inside.tar.zst";
    EXPECT_EQ(result.is_ok(), should_extract) << name << ": " << (result ? "extracted" : result.status().message());
  }
}

}  // namespace
}  // namespace gpubox::harvest
