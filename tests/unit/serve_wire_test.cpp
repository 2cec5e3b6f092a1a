// The agent ↔ serve worker frame codec (agent/serve/worker_wire.h) and the
// bounded output ring (agent/serve/log_ring.h), over a real socketpair.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <thread>

#include <gtest/gtest.h>

#include "agent/serve/log_ring.h"
#include "agent/serve/memfd_pool.h"
#include "agent/serve/worker_wire.h"
#include "base/fd.h"

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

TEST(ServeWire, AnEmptyAttachmentFlaggedInAMemfdNeedsNoMemfd) {
  // Found by fuzz_serve_wire: it used to index the (empty) list of passed memfds.
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  Fd a(sv[0]), b(sv[1]);
  std::string packed;
  nlohmann::json::to_msgpack(nlohmann::json{{"op", "result"}}, packed);
  std::string bytes = encode_prefix(packed.size(), {kInMemfd}) + packed;
  ASSERT_EQ(::write(a.get(), bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
  auto got = read_message(b.get(), -1, std::make_shared<ReleaseList>());
  ASSERT_TRUE(got && got->has_value()) << (got ? "end of file" : got.status().message());
  ASSERT_EQ((*got)->attachments.size(), 1u);
  EXPECT_EQ((*got)->attachments[0].size(), 0u);
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

FileId id_of(int fd) {
  struct stat info{};
  EXPECT_EQ(::fstat(fd, &info), 0);
  return {static_cast<std::uint64_t>(info.st_dev), static_cast<std::uint64_t>(info.st_ino)};
}

TEST(ServeMemfdPool, LendsSealedMemfdsAndReusesOnlyWhatWasGivenBack) {
  MemfdPool pool;
  auto first = pool.lend(3 << 20);
  ASSERT_TRUE(first) << first.status().message();
  int seals = ::fcntl(first->slot->fd.get(), F_GET_SEALS);
  EXPECT_TRUE(seals & F_SEAL_SHRINK);  // the worker cannot truncate it under the agent's mapping
  EXPECT_TRUE(seals & F_SEAL_SEAL);    // nor seal it against the agent's writes
  EXPECT_EQ(::ftruncate(first->slot->fd.get(), 4096), -1);
  EXPECT_GE(first->slot->size, 3u << 20);
  first->slot->data[(3 << 20) - 1] = 'x';  // mapped, writable
  FileId lent = first->slot->id;
  EXPECT_EQ(id_of(first->slot->fd.get()), lent);

  auto second = pool.lend(1 << 20);  // the first is still lent: another memfd
  ASSERT_TRUE(second);
  EXPECT_FALSE(second->slot->id == lent);
  EXPECT_EQ(pool.lent(), 2u);

  pool.give_back(lent);
  pool.give_back({1, 2});  // unknown: ignored
  EXPECT_EQ(pool.lent(), 1u);
  auto third = pool.lend(8 << 20);  // the given-back one, grown
  ASSERT_TRUE(third);
  EXPECT_EQ(third->slot->id, lent);
  EXPECT_GE(third->slot->size, 8u << 20);
  EXPECT_EQ(third->slot->data[(3 << 20) - 1], 'x');  // the same pages

  // Full: what does not fit is a one-off, not kept.
  std::vector<MemfdPool::Lease> held;
  for (int i = 0; i < 6; ++i) {
    auto lease = pool.lend(1 << 20);
    ASSERT_TRUE(lease);
    held.push_back(std::move(*lease));
  }
  EXPECT_EQ(pool.pooled(), MemfdPool::kMaxSlots);
  EXPECT_FALSE(held.back().slot->pooled);
  auto huge = pool.lend(MemfdPool::kMaxPooledBytes);
  ASSERT_TRUE(huge);
  EXPECT_FALSE(huge->slot->pooled);
}

TEST(ServeWire, AReusedMemfdCarriesOnlyTheNewMessage) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  Fd a(sv[0]), b(sv[1]);
  MemfdPool pool;
  auto lease = pool.lend(4 << 20);
  ASSERT_TRUE(lease);
  MemfdTarget target = lease->target();
  auto send = [&](char fill, std::size_t size) {
    std::vector<zmq::message_t> attachments;
    attachments.emplace_back(std::string(size, fill).data(), size);
    EXPECT_EQ(memfd_extent(attachments), (size + kPage - 1) / kPage * kPage);
    std::thread writer([&] { EXPECT_TRUE(write_message(a.get(), {{"op", "call"}}, attachments, &target)); });
    auto unmapped = std::make_shared<ReleaseList>();
    auto got = read_message(b.get(), -1, unmapped);
    writer.join();
    EXPECT_TRUE(got && got->has_value());
    EXPECT_EQ((*got)->attachments[0].size(), size);
    EXPECT_EQ((*got)->attachments[0].to_string(), std::string(size, fill));
    EXPECT_TRUE(unmapped->take().empty());  // the frame still maps it
    (*got)->attachments.clear();
    auto released = unmapped->take();  // its last frame gone: the memfd is named for "released"
    EXPECT_EQ(released.size(), 1u);
    if (!released.empty()) {
      EXPECT_EQ(released[0], lease->slot->id);
    }
  };
  send('a', 3 << 20);
  send('b', (1 << 20) + 10);
  // Up to the page end the earlier message's bytes are gone (zeroed), not just hidden by the length.
  for (std::size_t at = (1 << 20) + 10; at < (1 << 20) + kPage; ++at) ASSERT_EQ(lease->slot->data[at], 0) << at;
  EXPECT_EQ(lease->slot->data[(1 << 20) + kPage], 'a');  // beyond the extent: not part of the message

  nlohmann::json released = released_body({{1, 2}, {3, 4}});
  EXPECT_EQ(released["op"], "released");
  auto files = released_files(released);
  ASSERT_EQ(files.size(), 2u);
  EXPECT_EQ(files[1], (FileId{3, 4}));
  EXPECT_TRUE(released_files({{"files", {"junk", {1}}}}).empty());
}

// How many mappings of memfds named name this process has (/proc/self/maps).
int mappings_named(const std::string& name) {
  FILE* maps = std::fopen("/proc/self/maps", "r");
  if (!maps) return -1;
  int count = 0;
  char line[4096];
  while (std::fgets(line, sizeof line, maps)) {
    if (std::strstr(line, ("memfd:" + name).c_str())) ++count;
  }
  std::fclose(maps);
  return count;
}

TEST(ServeWire, AWarmMemfdStaysMappedBetweenMessagesAndAOneOffDoesNot) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  Fd a(sv[0]), b(sv[1]);
  // The peer's warm memfd: sealed against shrinking only, so it is written again (and may grow).
  Fd warm(::memfd_create("gpubox-test-warm", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  ASSERT_TRUE(warm.valid());
  ASSERT_EQ(::ftruncate(warm.get(), 1 << 20), 0);
  ASSERT_EQ(::fcntl(warm.get(), F_ADD_SEALS, F_SEAL_SHRINK), 0);
  auto list = std::make_shared<ReleaseList>();
  auto send = [&](char fill, std::size_t size, const MemfdTarget* target) {
    std::vector<zmq::message_t> attachments;
    attachments.emplace_back(std::string(size, fill).data(), size);
    std::thread writer([&] { EXPECT_TRUE(write_message(a.get(), {{"op", "result"}}, attachments, target)); });
    auto got = read_message(b.get(), -1, list);
    writer.join();
    EXPECT_TRUE(got && got->has_value());
    return got && got->has_value() ? std::move(**got) : WireMessage{};
  };
  auto map_target = [&](std::size_t size) {
    void* data = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, warm.get(), 0);
    EXPECT_NE(data, MAP_FAILED);
    return MemfdTarget{warm.get(), static_cast<char*>(data)};
  };
  MemfdTarget target = map_target(1 << 20);
  const std::size_t size = 300 << 10;
  auto first = send('a', size, &target);
  ASSERT_EQ(first.attachments.size(), 1u);
  const void* where = first.attachments[0].data();
  EXPECT_EQ(first.attachments[0].to_string(), std::string(size, 'a'));
  first.attachments.clear();
  EXPECT_EQ(list->take().size(), 1u);  // released, though still mapped here
  auto second = send('b', size, &target);
  ASSERT_EQ(second.attachments.size(), 1u);
  EXPECT_EQ(second.attachments[0].data(), where);  // the same mapping, not a new one
  EXPECT_EQ(second.attachments[0].to_string(), std::string(size, 'b'));
  second.attachments.clear();
  EXPECT_EQ(mappings_named("gpubox-test-warm"), 2);  // the target here, and the kept one

  // A message that needs more of it than is mapped: mapped again.
  ASSERT_EQ(::ftruncate(warm.get(), 3 << 20), 0);
  ::munmap(target.data, 1 << 20);
  target = map_target(3 << 20);
  auto grown = send('c', (2 << 20) + 5, &target);
  ASSERT_EQ(grown.attachments.size(), 1u);
  EXPECT_EQ(grown.attachments[0].to_string(), std::string((2 << 20) + 5, 'c'));
  grown.attachments.clear();
  EXPECT_EQ(mappings_named("gpubox-test-warm"), 2);
  ::munmap(target.data, 3 << 20);

  // A one-off memfd (write_message's own, sealed against writing) is mapped for its message alone.
  auto once = send('d', size, nullptr);
  EXPECT_EQ(mappings_named("gpubox-serve"), 1);
  once.attachments.clear();
  EXPECT_EQ(mappings_named("gpubox-serve"), 0);

  list.reset();  // the reader is done with this peer: nothing of its memfds stays mapped
  EXPECT_EQ(mappings_named("gpubox-test-warm"), 0);
}

TEST(ServeWire, ASmallMessageIsWrittenWithoutWaitingAndParsedWholeFromPeekedBytes) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  Fd a(sv[0]), b(sv[1]);
  std::vector<zmq::message_t> attachments;
  attachments.emplace_back("abc", 3);
  attachments.emplace_back();
  nlohmann::json body = {{"op", "result"}, {"id", 9}, {"value", "v"}};
  ASSERT_TRUE(try_write_message(a.get(), body, attachments));
  ASSERT_TRUE(try_write_message(a.get(), {{"op", "released"}}));
  std::string bytes(1 << 16, '\0');
  ssize_t n = ::recv(b.get(), bytes.data(), bytes.size(), MSG_PEEK | MSG_DONTWAIT);
  ASSERT_GT(n, 0);
  std::string_view peeked(bytes.data(), static_cast<std::size_t>(n));
  auto first = parse_whole_message(peeked);
  ASSERT_TRUE(first);
  EXPECT_EQ(first->first.body, body);
  ASSERT_EQ(first->first.attachments.size(), 2u);
  EXPECT_EQ(first->first.attachments[0].to_string(), "abc");
  EXPECT_EQ(first->first.attachments[1].size(), 0u);
  auto second = parse_whole_message(peeked.substr(first->second));
  ASSERT_TRUE(second);
  EXPECT_EQ(second->first.body["op"], "released");
  EXPECT_EQ(first->second + second->second, peeked.size());  // the two messages, nothing else
  // Every cut short of the whole first message is "not whole yet", never a message.
  for (std::size_t cut = 0; cut < first->second; ++cut) EXPECT_FALSE(parse_whole_message(peeked.substr(0, cut))) << cut;
}

TEST(ServeWire, ParseWholeMessageLeavesMemfdsAndGarbageToReadMessage) {
  std::string packed;
  nlohmann::json::to_msgpack(nlohmann::json{{"op", "result"}}, packed);
  std::string in_memfd = encode_prefix(packed.size(), {kMemfdThreshold | kInMemfd}) + packed;
  EXPECT_FALSE(parse_whole_message(in_memfd));
  std::string bad_body = encode_prefix(3, {}) + "\xc1\xc1\xc1";  // 0xc1 is never msgpack
  EXPECT_FALSE(parse_whole_message(bad_body));
  EXPECT_FALSE(parse_whole_message(encode_prefix(0, {}) + "x"));
  EXPECT_FALSE(parse_whole_message(encode_prefix(1, {kMaxAttachmentBytes + 1}) + "x"));
}

TEST(ServeWire, TryWriteWritesNothingWhenTheBufferLacksRoomOrAnAttachmentIsLarge) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
  Fd a(sv[0]), b(sv[1]);
  std::vector<zmq::message_t> large;
  large.emplace_back(std::string(kMemfdThreshold, 'z').data(), kMemfdThreshold);
  EXPECT_FALSE(try_write_message(a.get(), {{"op", "call"}}, large));
  char probe;
  EXPECT_EQ(::recv(b.get(), &probe, 1, MSG_DONTWAIT), -1);  // nothing was written
  // Fill a's buffer until the kernel refuses more, then a small message must not wait.
  std::string chunk(4096, 'f');
  std::size_t filled = 0;
  while (true) {
    ssize_t n = ::send(a.get(), chunk.data(), chunk.size(), MSG_DONTWAIT);
    if (n <= 0) break;
    filled += static_cast<std::size_t>(n);
  }
  ASSERT_GT(filled, 0u);
  EXPECT_FALSE(try_write_message(a.get(), {{"op", "call"}, {"id", 1}}));
  std::string drained(1 << 16, '\0');
  std::size_t got = 0;
  while (true) {
    ssize_t n = ::recv(b.get(), drained.data(), drained.size(), MSG_DONTWAIT);
    if (n <= 0) break;
    got += static_cast<std::size_t>(n);
  }
  EXPECT_EQ(got, filled);  // the filler alone: the refused message left no byte behind
  EXPECT_TRUE(try_write_message(a.get(), {{"op", "call"}, {"id", 2}}));
  auto read = read_message(b.get(), -1);
  ASSERT_TRUE(read && read->has_value());
  EXPECT_EQ((*read)->body["id"], 2);
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
