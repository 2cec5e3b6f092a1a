// base64_decode, base64_encode and write_fully: the small shared helpers of rpc/.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <csignal>
#include <string>
#include <thread>

#include "base/base64.h"
#include "base/fd.h"

namespace gpubox {
namespace {

TEST(Base64Test, DecodesWithAndWithoutPaddingAndSkipsLineBreaks) {
  EXPECT_EQ(base64_decode("aGVsbG8="), "hello");
  EXPECT_EQ(base64_decode("aGVsbG8"), "hello");
  EXPECT_EQ(base64_decode("aGVs\nbG8h\r\n"), "hello!");
  EXPECT_EQ(base64_decode(""), "");
  EXPECT_EQ(base64_decode("/+8="), std::string("\xff\xef"));
}

TEST(Base64Test, RefusesForeignCharactersAndDataAfterPadding) {
  EXPECT_FALSE(base64_decode("aGVs bG8="));
  EXPECT_FALSE(base64_decode("aGVsbG8-"));
  EXPECT_FALSE(base64_decode("aG=VsbG8"));
}

TEST(Base64Test, EncodesWithPaddingAndRoundTripsEveryByte) {
  EXPECT_EQ(base64_encode(""), "");
  EXPECT_EQ(base64_encode("h"), "aA==");
  EXPECT_EQ(base64_encode("he"), "aGU=");
  EXPECT_EQ(base64_encode("hello"), "aGVsbG8=");
  EXPECT_EQ(base64_encode(std::string("\xff\xef")), "/+8=");
  std::string all;
  for (int i = 0; i < 256; ++i) all.push_back(static_cast<char>(i));
  for (size_t n : {size_t{0}, size_t{1}, size_t{2}, size_t{3}, size_t{255}, size_t{256}}) {
    EXPECT_EQ(base64_decode(base64_encode(all.substr(0, n))), all.substr(0, n)) << n;
  }
}

TEST(WriteFullyTest, WritesEverythingThroughAPipeThatTakesLessAtATime) {
  int fds[2];
  ASSERT_EQ(::pipe2(fds, O_CLOEXEC), 0);
  Fd read_end(fds[0]), write_end(fds[1]);
  ASSERT_GT(::fcntl(write_end.get(), F_SETPIPE_SZ, 4096), 0);
  std::string data(1 << 20, 'x');
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 31);
  std::string received;
  std::thread reader([&] {
    char buffer[1000];  // smaller reads than the writes: the writer sees short writes
    ssize_t n;
    while ((n = ::read(read_end.get(), buffer, sizeof buffer)) > 0) received.append(buffer, static_cast<std::size_t>(n));
  });
  EXPECT_EQ(write_fully(write_end.get(), data.data(), data.size()), 0);
  write_end.reset();
  reader.join();
  EXPECT_EQ(received, data);
}

TEST(WriteFullyTest, ReportsTheErrnoOfAFailedWrite) {
  int fds[2];
  ASSERT_EQ(::pipe2(fds, O_CLOEXEC), 0);
  Fd write_end(fds[1]);
  ::close(fds[0]);
  signal(SIGPIPE, SIG_IGN);
  EXPECT_EQ(write_fully(write_end.get(), "x", 1), EPIPE);
  EXPECT_EQ(write_fully(-1, "x", 1), EBADF);
}

}  // namespace
}  // namespace gpubox
