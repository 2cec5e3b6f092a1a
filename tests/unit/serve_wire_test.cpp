// The agent ↔ serve worker frame codec (agent/serve/worker_wire.h) and the
// bounded output ring (agent/serve/log_ring.h), over a real socketpair.
#include <sys/socket.h>

#include <cstring>
#include <thread>

#include <gtest/gtest.h>

#include "agent/serve/log_ring.h"
#include "agent/serve/worker_wire.h"
#include "rpc/fd.h"

namespace gpubox::serve {
namespace {

TEST(ServeWire, PrefixRoundTripsAndChecksLimits) {
  std::string prefix = encode_prefix(5, {3, 1ull << 26});
  ASSERT_EQ(prefix.size(), kPrefixBytes + 16);
  auto parsed = parse_prefix(std::string_view(prefix).substr(0, kPrefixBytes));
  ASSERT_TRUE(parsed) << parsed.status().message();
  EXPECT_EQ(parsed->body_bytes, 5u);
  EXPECT_EQ(parsed->attachments, 2u);
  auto lengths = parse_lengths(std::string_view(prefix).substr(kPrefixBytes), 2);
  ASSERT_TRUE(lengths);
  EXPECT_EQ((*lengths)[1], 1ull << 26);

  EXPECT_FALSE(parse_prefix(encode_prefix(0, {}).substr(0, kPrefixBytes)));  // an empty body is no msgpack map
  EXPECT_FALSE(parse_prefix(encode_prefix(kMaxBodyBytes + 1, {}).substr(0, kPrefixBytes)));
  std::vector<std::uint64_t> too_many(kMaxAttachments + 1, 1);
  auto many = parse_prefix(encode_prefix(1, too_many).substr(0, kPrefixBytes));
  ASSERT_FALSE(many);
  EXPECT_NE(many.status().message().find("attachment count"), std::string::npos);
  auto big = parse_lengths(encode_prefix(1, {kMaxAttachmentBytes + 1}).substr(kPrefixBytes), 1);
  ASSERT_FALSE(big);
  EXPECT_NE(big.status().message().find("attachment 0"), std::string::npos);
  EXPECT_FALSE(parse_prefix("short"));
}

TEST(ServeWire, MessagesCrossASocketpairWhole) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  Fd a(sv[0]), b(sv[1]);
  std::vector<zmq::message_t> attachments;
  attachments.emplace_back(std::string(3 << 20, 'x').data(), 3 << 20);  // bigger than the socket's buffer
  attachments.emplace_back();                                           // empty
  attachments.emplace_back("tail", 4);
  nlohmann::json body = {{"op", "call"}, {"id", 7}, {"data", nlohmann::json::binary({1, 2, 3})}};
  std::thread writer([&] { EXPECT_TRUE(write_message(a.get(), body, attachments)); });
  auto got = read_message(b.get(), -1);
  writer.join();
  ASSERT_TRUE(got) << got.status().message();
  ASSERT_TRUE(got->has_value());
  EXPECT_EQ((*got)->body, body);
  ASSERT_EQ((*got)->attachments.size(), 3u);
  EXPECT_EQ((*got)->attachments[0].size(), 3u << 20);
  EXPECT_EQ(static_cast<const char*>((*got)->attachments[0].data())[12345], 'x');
  EXPECT_EQ((*got)->attachments[1].size(), 0u);
  EXPECT_EQ((*got)->attachments[2].to_string(), "tail");

  a.reset();  // end of file before a message: nullopt, not an error
  auto eof = read_message(b.get(), -1);
  ASSERT_TRUE(eof);
  EXPECT_FALSE(eof->has_value());
}

TEST(ServeWire, GarbageAndTruncationAreErrors) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  Fd a(sv[0]), b(sv[1]);
  std::string bad = encode_prefix(2, {}) + "\xc1\xc1";  // not msgpack
  ASSERT_EQ(write_fully(a.get(), bad.data(), bad.size()), 0);
  EXPECT_FALSE(read_message(b.get(), -1));
  std::string cut = encode_prefix(1, {10}) + "\x80" + "abc";  // the attachment ends early
  ASSERT_EQ(write_fully(a.get(), cut.data(), cut.size()), 0);
  a.reset();
  auto truncated = read_message(b.get(), -1);
  ASSERT_FALSE(truncated);
  EXPECT_NE(truncated.status().message().find("middle of a message"), std::string::npos);
}

TEST(ServeLogRing, KeepsTheLastBytesAndCountsTheDropped) {
  LogRing ring(8);
  ring.append("hello ");
  ring.append("world");
  EXPECT_EQ(ring.tail(0), "lo world");
  EXPECT_EQ(ring.dropped(), 3u);
  EXPECT_EQ(ring.tail(3), "rld");
  ring.append("0123456789");
  EXPECT_EQ(ring.tail(0), "23456789");
  EXPECT_EQ(ring.dropped(), 13u);
}

}  // namespace
}  // namespace gpubox::serve
