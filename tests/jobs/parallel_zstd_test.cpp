// ParallelZstd: frames come out in input order and decode (as one zstd stream,
// with libzstd and with the zstd program) to exactly the input; a failing
// output stops it with an error.
#include "base/parallel_zstd.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <random>
#include <string>

#include "tests/unit/temp_dir.h"

namespace gpubox::jobs {
namespace {

// Every frame of a zstd stream, decoded in sequence.
std::string decode_all(const std::string& stream) {
  ZSTD_DStream* d = ZSTD_createDStream();
  std::string out;
  std::vector<char> buffer(1 << 16);
  ZSTD_inBuffer in{stream.data(), stream.size(), 0};
  while (in.pos < in.size) {
    ZSTD_outBuffer o{buffer.data(), buffer.size(), 0};
    std::size_t r = ZSTD_decompressStream(d, &o, &in);
    if (ZSTD_isError(r)) {
      ADD_FAILURE() << ZSTD_getErrorName(r);
      break;
    }
    out.append(buffer.data(), o.pos);
  }
  ZSTD_freeDStream(d);
  return out;
}

// Text-like and random bytes, so blocks compress differently and finish out of order.
std::string mixed_input(std::size_t size) {
  std::mt19937_64 random(11);
  std::string input(size, '\0');
  for (std::size_t i = 0; i < size; ++i) input[i] = (i / 70000) % 2 ? static_cast<char>(random()) : "abc\n"[i % 4];
  return input;
}

TEST(ParallelZstdTest, FramesComeOutInOrderAndDecodeToTheInput) {
  std::string input = mixed_input(3'000'001);
  for (int threads : {1, 3, 8}) {
    std::string stream;
    int frames = 0;
    ParallelZstd zstd(3, threads, [&](std::string frame) {
      stream += frame;
      ++frames;
      return true;
    }, 100'000);
    // Uneven writes straddle block boundaries.
    for (std::size_t at = 0; at < input.size(); at += 77'777) {
      ASSERT_TRUE(zstd.write(input.data() + at, std::min<std::size_t>(77'777, input.size() - at)));
    }
    ASSERT_TRUE(zstd.finish()) << zstd.error();
    EXPECT_EQ(frames, 31) << "one frame per 100,000-byte block";
    EXPECT_TRUE(decode_all(stream) == input) << threads << " threads";
  }
}

TEST(ParallelZstdTest, TheZstdProgramDecodesTheFramesAsOneFile) {
  test::TempDir dir;
  std::string input = mixed_input(1'000'000);
  std::string stream;
  ParallelZstd zstd(3, 2, [&](std::string frame) { stream += frame; return true; }, 64 << 10);
  ASSERT_TRUE(zstd.write(input.data(), input.size()));
  ASSERT_TRUE(zstd.finish());
  std::ofstream(dir.path() + "/data.zst", std::ios::binary) << stream;
  ASSERT_EQ(std::system(("zstd -q -d -f '" + dir.path() + "/data.zst' -o '" + dir.path() + "/data'").c_str()), 0);
  EXPECT_TRUE(test::TempDir::read_or_missing(dir.path() + "/data") == input);
}

TEST(ParallelZstdTest, AFailingOutputStopsWritesWithAnError) {
  std::string input = mixed_input(2'000'000);
  int calls = 0;
  ParallelZstd zstd(1, 2, [&](std::string) { return ++calls < 3; }, 50'000);
  bool accepted = true;
  for (std::size_t at = 0; at < input.size() && accepted; at += 50'000) accepted = zstd.write(input.data() + at, 50'000);
  EXPECT_FALSE(accepted && zstd.finish());
  EXPECT_EQ(zstd.error(), "the archive's output failed");
  EXPECT_EQ(calls, 3) << "nothing handed out after the failure";
}

TEST(ParallelZstdTest, NothingWrittenGivesNoFrames) {
  int frames = 0;
  ParallelZstd zstd(3, 2, [&](std::string) { return ++frames > 0; });
  EXPECT_TRUE(zstd.finish());
  EXPECT_EQ(frames, 0);
}

}  // namespace
}  // namespace gpubox::jobs
