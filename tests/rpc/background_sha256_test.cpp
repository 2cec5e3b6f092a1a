// BackgroundSha256 against Sha256 over the same bytes, and what it holds.
#include "base/background_sha256.h"

#include <gtest/gtest.h>

#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "base/sha256.h"

namespace gpubox {
namespace {

std::shared_ptr<std::string> random_bytes(std::size_t size, std::mt19937& random) {
  auto bytes = std::make_shared<std::string>(size, '\0');
  for (char& c : *bytes) c = static_cast<char>(random());
  return bytes;
}

TEST(BackgroundSha256, DigestEqualsSha256OverTheSamePiecesInOrder) {
  std::mt19937 random(11);
  BackgroundSha256 background(2);  // a short queue: update() must wait for the hasher
  Sha256 direct;
  for (std::size_t size : {0u, 1u, 63u, 64u, 65u, 4096u, 1u << 20, 3u, (1u << 20) + 7}) {
    auto piece = random_bytes(size, random);
    direct.update(piece->data(), piece->size());
    const char* data = piece->data();
    background.update(std::move(piece), data, size);
  }
  EXPECT_EQ(background.hex_digest(), direct.hex_digest());
}

// Threads: in /proc/self/status.
int thread_count() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("Threads:", 0) == 0) return std::stoi(line.substr(8));
  }
  return -1;
}

TEST(BackgroundSha256, SmallPiecesAreHashedInlineWithoutAThread) {
  std::mt19937 random(9);
  int before = thread_count();
  BackgroundSha256 background;
  Sha256 direct;
  for (int i = 0; i < 20; ++i) {
    auto piece = random_bytes(BackgroundSha256::kInlineBytes - 1, random);
    direct.update(piece->data(), piece->size());
    const char* data = piece->data();
    background.update(std::move(piece), data, BackgroundSha256::kInlineBytes - 1);
  }
  EXPECT_EQ(thread_count(), before);
  EXPECT_EQ(background.hex_digest(), direct.hex_digest());
}

TEST(BackgroundSha256, NothingQueuedHashesTheEmptyString) {
  BackgroundSha256 background;
  EXPECT_EQ(background.hex_digest(), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

TEST(BackgroundSha256, ReleasesEachBufferOnceHashed) {
  std::mt19937 random(5);
  BackgroundSha256 background;
  std::vector<std::weak_ptr<std::string>> given;
  for (int i = 0; i < 8; ++i) {
    auto piece = random_bytes(256 << 10, random);
    given.push_back(piece);
    const char* data = piece->data();
    background.update(std::move(piece), data, 256 << 10);
  }
  (void)background.hex_digest();
  for (const auto& piece : given) EXPECT_TRUE(piece.expired());
}

TEST(BackgroundSha256, DestroyedWithPiecesQueuedHashesThemAndEnds) {
  std::mt19937 random(3);
  std::weak_ptr<std::string> last;
  {
    BackgroundSha256 background;
    for (int i = 0; i < 4; ++i) {
      auto piece = random_bytes(1 << 20, random);
      last = piece;
      const char* data = piece->data();
      background.update(std::move(piece), data, 1 << 20);
    }
  }
  EXPECT_TRUE(last.expired());
}

}  // namespace
}  // namespace gpubox
