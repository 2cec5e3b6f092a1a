// The agent ↔ serve worker frame codec (agent/serve/worker_wire.h) and the
// bounded output ring (agent/serve/log_ring.h), over a real socketpair.
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

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
  attachments.emplace_back(std::string(3 << 20, 'x').data(), 3 << 20);  // in the memfd
  attachments.emplace_back(std::string(kMemfdThreshold + 1, 'y').data(), kMemfdThreshold + 1);  // the memfd's next page
  attachments.emplace_back();                                           // empty
  attachments.emplace_back("tail", 4);
  nlohmann::json body = {{"op", "call"}, {"id", 7}, {"data", nlohmann::json::binary({1, 2, 3})}};
  std::thread writer([&] { EXPECT_TRUE(write_message(a.get(), body, attachments)); });
  auto got = read_message(b.get(), -1);
  writer.join();
  ASSERT_TRUE(got) << got.status().message();
  ASSERT_TRUE(got->has_value());
  EXPECT_EQ((*got)->body, body);
  ASSERT_EQ((*got)->attachments.size(), 4u);
  EXPECT_EQ((*got)->attachments[0].size(), 3u << 20);
  EXPECT_EQ(static_cast<const char*>((*got)->attachments[0].data())[12345], 'x');
  EXPECT_EQ((*got)->attachments[1].size(), kMemfdThreshold + 1);
  EXPECT_EQ(static_cast<const char*>((*got)->attachments[1].data())[kMemfdThreshold], 'y');
  EXPECT_EQ((*got)->attachments[2].size(), 0u);
  EXPECT_EQ((*got)->attachments[3].to_string(), "tail");

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

TEST(ServeWire, AnUnsealedMemfdIsRefused) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  Fd a(sv[0]), b(sv[1]);
  Fd memfd(::memfd_create("unsealed", MFD_CLOEXEC));
  ASSERT_EQ(::ftruncate(memfd.get(), 1 << 20), 0);
  std::string message = encode_prefix(1, {kInMemfd | (1 << 20)}) + "\x80";
  iovec part{message.data(), message.size()};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr header{};
  header.msg_iov = &part;
  header.msg_iovlen = 1;
  header.msg_control = control;
  header.msg_controllen = sizeof control;
  cmsghdr* rights = CMSG_FIRSTHDR(&header);
  rights->cmsg_level = SOL_SOCKET;
  rights->cmsg_type = SCM_RIGHTS;
  rights->cmsg_len = CMSG_LEN(sizeof(int));
  int passed = memfd.get();
  std::memcpy(CMSG_DATA(rights), &passed, sizeof passed);
  ASSERT_EQ(::sendmsg(a.get(), &header, 0), static_cast<ssize_t>(message.size()));
  auto got = read_message(b.get(), -1);
  ASSERT_FALSE(got);
  EXPECT_NE(got.status().message().find("F_SEAL_SHRINK"), std::string::npos);
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
