// Messages between the agent and a serve worker on their private socketpair,
// in both directions: an 8-byte prefix (u32 little-endian body length, u32
// attachment count), count × u64 attachment lengths, the msgpack body, then
// the small attachments' raw bytes. Attachments of kMemfdThreshold bytes or
// more travel in one memfd per message instead, passed with SCM_RIGHTS along
// with the prefix: their length has bit 63 set and each starts at the next
// page boundary after the one before, so the chunks of one tensor are one
// contiguous mapping on the other side. The agent maps a worker's memfd
// (sealed against shrinking, so a mapping can never fault) as the ZeroMQ
// frames it sends on: one copy per hop, no re-encoding, nothing in between.
// Either side may reuse a memfd for later messages once the other has said
// that its mappings of it are gone: an {"op": "released", "files": [[dev,
// ino], ...]} message (MemfdPool on the agent's side). Functions are
// stateless and may be called from any thread; ReleaseList is thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include "base/fd.h"
#include "base/status.h"
#include "base/thread_annotations.h"

namespace gpubox::serve {

inline constexpr std::uint32_t kMaxBodyBytes = 64u << 20;
inline constexpr std::uint32_t kMaxAttachments = 64;             // the RPC limit of one message
inline constexpr std::uint64_t kMaxAttachmentBytes = 64ull << 20;  // one ZeroMQ frame
inline constexpr std::size_t kPrefixBytes = 8;
inline constexpr std::uint64_t kMemfdThreshold = 256 << 10;
inline constexpr std::uint64_t kInMemfd = 1ull << 63;  // a length's flag: the bytes are in the memfd
inline constexpr std::uint64_t kPage = 4096;
// BYTES rounded up to a whole number of pages: where the next memfd extent may start.
inline constexpr std::uint64_t page_round(std::uint64_t bytes) { return (bytes + kPage - 1) / kPage * kPage; }

// A file's identity (st_dev, st_ino): how both sides name a memfd in "released".
struct FileId {
  std::uint64_t dev = 0;
  std::uint64_t ino = 0;
  bool operator==(const FileId& other) const { return dev == other.dev && ino == other.ino; }
};

// One shared, read-only mapping of a peer's memfd. Its descriptor stays open
// with it, so no other memfd can take its file id meanwhile.
struct MemfdMapping {
  MemfdMapping(Fd memfd, FileId file, char* bytes, std::uint64_t size)
      : fd(std::move(memfd)), id(file), data(bytes), length(size) {}
  ~MemfdMapping();
  MemfdMapping(const MemfdMapping&) = delete;
  MemfdMapping& operator=(const MemfdMapping&) = delete;
  const Fd fd;
  const FileId id;
  char* const data;
  const std::uint64_t length;
};

// The peer's memfds as one reader of its messages sees them: those no frame
// here uses any more (a frame's ZeroMQ free function adds them, from any
// thread), until the next "released" message; and the mappings of its
// reusable ones, kept between messages, since mapping 64 MiB costs as much
// as a tenth of sending it. Thread-safe.
class ReleaseList {
 public:
  void add(FileId id);
  std::vector<FileId> take();
  bool empty();
  // A mapping of the reusable memfd (file id) at least needed bytes long:
  // the one kept from an earlier message of it, else a new one of needed
  // bytes, kept for later (the last kKeptMappings memfds').
  Result<std::shared_ptr<MemfdMapping>> kept_mapping(Fd memfd, FileId id, std::uint64_t needed);

  static constexpr std::size_t kKeptMappings = 4;  // the worker keeps as many warm memfds

 private:
  Mutex mutex_;
  std::vector<FileId> files_ GUARDED_BY(mutex_);
  Mutex kept_mutex_;
  std::vector<std::shared_ptr<MemfdMapping>> kept_ GUARDED_BY(kept_mutex_);  // oldest first
};

// The "released" message's body for files.
nlohmann::json released_body(const std::vector<FileId>& files);
// Its files; malformed entries are skipped.
std::vector<FileId> released_files(const nlohmann::json& body);

// A memfd mapped here that write_message fills instead of making a fresh one:
// sealed against shrinking, at least memfd_extent(attachments) long.
struct MemfdTarget {
  int fd = -1;
  char* data = nullptr;
};

// How many bytes of a memfd the attachments that go in one take (0: none
// does): each starts on a page boundary; the end is rounded up to a page.
std::uint64_t memfd_extent(const std::vector<zmq::message_t>& attachments);

struct WireMessage {
  nlohmann::json body;
  std::vector<zmq::message_t> attachments;
};

// The prefix and the length table of a message.
std::string encode_prefix(std::size_t body_bytes, const std::vector<std::uint64_t>& lengths);

struct Prefix {
  std::uint32_t body_bytes = 0;
  std::uint32_t attachments = 0;
};
// Checks the limits; invalid_request naming the field otherwise.
Result<Prefix> parse_prefix(std::string_view bytes);
// count × u64 lengths (kInMemfd flags kept), each at most kMaxAttachmentBytes.
Result<std::vector<std::uint64_t>> parse_lengths(std::string_view bytes, std::uint32_t count);

// Writes one whole message (blocking; retries short writes and EINTR).
// fd must be a socket (sendmsg). The large attachments go into target when
// one is given (the gaps between them zeroed: nothing of an earlier message
// stays within the extent), else into a fresh memfd sealed for good.
Status write_message(int fd, const nlohmann::json& body, const std::vector<zmq::message_t>& attachments = {},
                     const MemfdTarget* target = nullptr);

// Writes one whole message whose attachments are all small (under the memfd
// threshold) without waiting for room: false, with nothing written, when the
// socket's buffer lacks room for it or the write fails. (A write the kernel
// cuts short anyway is finished, blocking.) For a thread that must not block.
bool try_write_message(int fd, const nlohmann::json& body, const std::vector<zmq::message_t>& attachments = {});

// A whole message at the start of bytes (peeked from a channel) with no
// attachment in a memfd, and the bytes it takes; nullopt when bytes begin with
// no such message (not whole yet, in a memfd, malformed): read_message then
// reads it, or says what is wrong with it.
std::optional<std::pair<WireMessage, std::size_t>> parse_whole_message(std::string_view bytes);

// Reads one message, blocking. Returns nullopt on end of file before a
// message began, or when abort_fd (>= 0) becomes readable while waiting.
// A malformed message or an end of file inside one is an error. A passed
// memfd must be sealed against shrinking; its attachments are mapped, and
// once the last of their frames is closed the memfd's id goes to unmapped
// (when given) for the next "released" message.
Result<std::optional<WireMessage>> read_message(int fd, int abort_fd,
                                                std::shared_ptr<ReleaseList> unmapped = nullptr);

}  // namespace gpubox::serve
