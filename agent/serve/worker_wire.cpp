#include "agent/serve/worker_wire.h"

#include <fcntl.h>
#include <poll.h>
#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "base/fd.h"
#include "base/thread_annotations.h"
#include "rpc/protocol.h"

namespace gpubox::serve {
namespace {

// GPUBOX_SERVE_MEMFD_THRESHOLD (bytes) overrides kMemfdThreshold, for benchmarks of both paths.
std::uint64_t memfd_threshold() {
  static const std::uint64_t threshold = [] {
    const char* text = std::getenv("GPUBOX_SERVE_MEMFD_THRESHOLD");
    return text && *text ? std::strtoull(text, nullptr, 10) : kMemfdThreshold;
  }();
  return threshold;
}

void put_le(std::string& out, std::uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

std::uint64_t get_le(std::string_view in, std::size_t at, int bytes) {
  std::uint64_t value = 0;
  for (int i = 0; i < bytes; ++i) value |= static_cast<std::uint64_t>(static_cast<std::uint8_t>(in[at + i])) << (8 * i);
  return value;
}

enum class Got { bytes, eof, aborted };

// Fills size bytes; eof/aborted only before the first byte arrived. A file
// descriptor passed along (SCM_RIGHTS) lands in *passed when it is given.
// A message's first part (its prefix) is waited for; the rest is usually
// there already, so it is read before polling.
Result<Got> read_exact(int fd, int abort_fd, void* into, std::size_t size, std::vector<Fd>* passed = nullptr) {
  char* at = static_cast<char*>(into);
  std::size_t done = 0;
  bool wait = passed != nullptr;
  while (done < size) {
    if (abort_fd >= 0 && wait) {
      pollfd fds[2] = {{fd, POLLIN, 0}, {abort_fd, POLLIN, 0}};
      int ready = ::poll(fds, 2, -1);
      if (ready < 0 && errno == EINTR) continue;
      if (ready < 0) return Status::from_errno(errno, "serve worker channel: poll");
      if ((fds[1].revents & POLLIN) && !(fds[0].revents & (POLLIN | POLLHUP))) {
        if (done == 0) return Got::aborted;
        return Status(ErrorCode::unavailable, "the serve worker ended in the middle of a message");
      }
    }
    iovec part{at + done, size - done};
    msghdr message{};
    message.msg_iov = &part;
    message.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 4)];
    if (passed) {
      message.msg_control = control;
      message.msg_controllen = sizeof control;
    }
    ssize_t n = ::recvmsg(fd, &message, MSG_CMSG_CLOEXEC | (abort_fd >= 0 ? MSG_DONTWAIT : 0));
    if (n < 0 && errno == EINTR) continue;
    wait = n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
    if (wait) continue;
    if (passed && n > 0) {
      for (cmsghdr* header = CMSG_FIRSTHDR(&message); header; header = CMSG_NXTHDR(&message, header)) {
        if (header->cmsg_level != SOL_SOCKET || header->cmsg_type != SCM_RIGHTS) continue;
        std::size_t count = (header->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (std::size_t i = 0; i < count; ++i) {
          int got = -1;
          std::memcpy(&got, CMSG_DATA(header) + i * sizeof(int), sizeof got);
          passed->emplace_back(got);
        }
      }
    }
    if (n < 0) return Status::from_errno(errno, "serve worker channel: read");
    if (n == 0) {
      if (done == 0) return Got::eof;
      return Status(ErrorCode::unavailable, "the serve worker ended in the middle of a message");
    }
    done += static_cast<std::size_t>(n);
  }
  return Got::bytes;
}

Status read_rest(int fd, int abort_fd, void* into, std::size_t size) {
  if (size == 0) return Status::ok();
  auto got = read_exact(fd, abort_fd, into, size);
  if (!got) return got.status();
  if (*got != Got::bytes) return Status(ErrorCode::unavailable, "the serve worker ended in the middle of a message");
  return Status::ok();
}

// One message's use of a memfd mapping, shared by the message's frames: once
// the last of them is gone the memfd is reported released (the peer may
// write it again).
struct MessageUse {
  ~MessageUse() {
    if (list) list->add(mapping->id);
  }
  std::shared_ptr<MemfdMapping> mapping;
  std::shared_ptr<ReleaseList> list;
};

void drop_use(void*, void* hint) { delete static_cast<std::shared_ptr<MessageUse>*>(hint); }

// A shared read-only mapping of memfd's first length bytes (no more: the peer
// chooses the file's size), prefaulted.
Result<std::shared_ptr<MemfdMapping>> map_memfd(Fd memfd, FileId id, std::uint64_t length) {
  length = std::max<std::uint64_t>(length, 1);
  void* data = ::mmap(nullptr, length, PROT_READ, MAP_SHARED | MAP_POPULATE, memfd.get(), 0);
  if (data == MAP_FAILED) return Status::from_errno(errno, "serve: mapping a memfd");
  return std::make_shared<MemfdMapping>(std::move(memfd), id, static_cast<char*>(data), length);
}

// The passed memfd, checked — sealed against shrinking (the peer cannot
// truncate it under a mapping, which would fault the agent) and long enough —
// and mapped: a reusable one (not sealed against writing: the peer's warm
// memfd) through list, which keeps its mapping for the next message.
Result<std::shared_ptr<MemfdMapping>> memfd_mapping(std::vector<Fd>& passed, std::uint64_t needed, ReleaseList* list) {
  if (passed.size() != 1) return Status(ErrorCode::invalid_request, "an attachment in a memfd came without exactly one memfd");
  int memfd = passed[0].get();
  int seals = ::fcntl(memfd, F_GET_SEALS);
  if (seals < 0 || !(seals & F_SEAL_SHRINK)) {
    return Status(ErrorCode::invalid_request, "the passed memfd is not sealed against shrinking (F_SEAL_SHRINK)");
  }
  struct stat info{};
  if (::fstat(memfd, &info) != 0 || static_cast<std::uint64_t>(info.st_size) < needed) {
    return Status(ErrorCode::invalid_request, "the passed memfd is shorter than its attachments");
  }
  FileId id{static_cast<std::uint64_t>(info.st_dev), static_cast<std::uint64_t>(info.st_ino)};
  if (list && !(seals & F_SEAL_WRITE)) return list->kept_mapping(std::move(passed[0]), id, needed);
  return map_memfd(std::move(passed[0]), id, needed);
}

// Drops sent bytes from the front of parts[first...]; the first part not wholly sent.
std::size_t skip_sent(std::vector<iovec>& parts, std::size_t first, std::size_t sent) {
  while (first < parts.size() && sent >= parts[first].iov_len) sent -= parts[first++].iov_len;
  if (first < parts.size()) {
    parts[first].iov_base = static_cast<char*>(parts[first].iov_base) + sent;
    parts[first].iov_len -= sent;
  }
  return first;
}

// Sends every part, blocking; passed (>= 0) travels with the first byte (SCM_RIGHTS).
Status send_parts(int fd, std::vector<iovec> parts, int passed) {
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
  bool fd_sent = passed < 0;
  std::size_t first = 0;
  while (first < parts.size()) {
    msghdr message{};
    message.msg_iov = parts.data() + first;
    message.msg_iovlen = std::min<std::size_t>(parts.size() - first, IOV_MAX);
    if (!fd_sent) {  // with the prefix's first byte
      std::memset(control, 0, sizeof control);
      message.msg_control = control;
      message.msg_controllen = sizeof control;
      cmsghdr* header = CMSG_FIRSTHDR(&message);
      header->cmsg_level = SOL_SOCKET;
      header->cmsg_type = SCM_RIGHTS;
      header->cmsg_len = CMSG_LEN(sizeof(int));
      std::memcpy(CMSG_DATA(header), &passed, sizeof passed);
    }
    // MSG_NOSIGNAL: a worker that died is an EPIPE here, never a SIGPIPE for the agent.
    ssize_t n = ::sendmsg(fd, &message, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::from_errno(errno, "serve worker channel: write");
    fd_sent = true;
    first = skip_sent(parts, first, static_cast<std::size_t>(n));
  }
  return Status::ok();
}

}  // namespace

MemfdMapping::~MemfdMapping() { ::munmap(data, length); }

Result<std::shared_ptr<MemfdMapping>> ReleaseList::kept_mapping(Fd memfd, FileId id, std::uint64_t needed) {
  MutexLock lock(kept_mutex_);
  for (auto it = kept_.begin(); it != kept_.end(); ++it) {
    if (!((*it)->id == id)) continue;
    if ((*it)->length >= needed) return *it;
    kept_.erase(it);  // a message needs more of it: mapped again
    break;
  }
  auto mapped = map_memfd(std::move(memfd), id, needed);
  if (!mapped) return mapped.status();
  kept_.push_back(*mapped);
  if (kept_.size() > kKeptMappings) kept_.erase(kept_.begin());
  return *mapped;
}

void ReleaseList::add(FileId id) {
  MutexLock lock(mutex_);
  files_.push_back(id);
}

std::vector<FileId> ReleaseList::take() {
  MutexLock lock(mutex_);
  return std::exchange(files_, {});
}

bool ReleaseList::empty() {
  MutexLock lock(mutex_);
  return files_.empty();
}

nlohmann::json released_body(const std::vector<FileId>& files) {
  nlohmann::json list = nlohmann::json::array();
  for (const FileId& file : files) list.push_back({file.dev, file.ino});
  return {{"op", "released"}, {"files", std::move(list)}};
}

std::vector<FileId> released_files(const nlohmann::json& body) {
  std::vector<FileId> files;
  auto list = body.find("files");
  if (list == body.end() || !list->is_array()) return files;
  for (const auto& entry : *list) {
    if (entry.is_array() && entry.size() == 2 && entry[0].is_number_unsigned() && entry[1].is_number_unsigned()) {
      files.push_back({entry[0].get<std::uint64_t>(), entry[1].get<std::uint64_t>()});
    }
  }
  return files;
}

std::uint64_t memfd_extent(const std::vector<zmq::message_t>& attachments) {
  std::uint64_t end = 0;
  for (const auto& attachment : attachments) {
    if (attachment.size() >= memfd_threshold()) end = page_round(end + attachment.size());
  }
  return end;
}

std::string encode_prefix(std::size_t body_bytes, const std::vector<std::uint64_t>& lengths) {
  std::string out;
  out.reserve(kPrefixBytes + 8 * lengths.size());
  put_le(out, body_bytes, 4);
  put_le(out, lengths.size(), 4);
  for (std::uint64_t length : lengths) put_le(out, length, 8);
  return out;
}

Result<Prefix> parse_prefix(std::string_view bytes) {
  if (bytes.size() != kPrefixBytes) return Status(ErrorCode::invalid_request, "prefix: expected 8 bytes");
  Prefix prefix;
  prefix.body_bytes = static_cast<std::uint32_t>(get_le(bytes, 0, 4));
  prefix.attachments = static_cast<std::uint32_t>(get_le(bytes, 4, 4));
  if (prefix.body_bytes == 0 || prefix.body_bytes > kMaxBodyBytes) {
    return Status(ErrorCode::invalid_request, "body length " + std::to_string(prefix.body_bytes) + ": expected 1 to " +
                                                  std::to_string(kMaxBodyBytes));
  }
  if (prefix.attachments > kMaxAttachments) {
    return Status(ErrorCode::invalid_request, "attachment count " + std::to_string(prefix.attachments) +
                                                  ": at most " + std::to_string(kMaxAttachments));
  }
  return prefix;
}

Result<std::vector<std::uint64_t>> parse_lengths(std::string_view bytes, std::uint32_t count) {
  if (bytes.size() != 8ull * count) return Status(ErrorCode::invalid_request, "length table: wrong size");
  std::vector<std::uint64_t> lengths(count);
  for (std::uint32_t i = 0; i < count; ++i) {
    lengths[i] = get_le(bytes, 8ull * i, 8);
    if ((lengths[i] & ~kInMemfd) > kMaxAttachmentBytes) {
      return Status(ErrorCode::invalid_request, "attachment " + std::to_string(i) + ": " + std::to_string(lengths[i] & ~kInMemfd) +
                                                    " bytes, more than one frame's " + std::to_string(kMaxAttachmentBytes));
    }
  }
  return lengths;
}

Status write_message(int fd, const nlohmann::json& body, const std::vector<zmq::message_t>& attachments,
                     const MemfdTarget* target) {
  std::string packed;
  nlohmann::json::to_msgpack(body, packed);
  std::vector<std::uint64_t> lengths;
  Fd memfd;
  std::uint64_t memfd_end = 0;
  for (const auto& attachment : attachments) {
    std::uint64_t length = attachment.size();
    if (length >= memfd_threshold() && target) {
      std::memcpy(target->data + memfd_end, attachment.data(), length);
      std::uint64_t next = page_round(memfd_end + length);
      std::memset(target->data + memfd_end + length, 0, next - memfd_end - length);
      memfd_end = next;
      lengths.push_back(length | kInMemfd);
      continue;
    }
    if (length >= memfd_threshold()) {
      if (!memfd.valid()) {
        memfd = Fd(::memfd_create("gpubox-serve", MFD_CLOEXEC | MFD_ALLOW_SEALING));
        if (!memfd.valid()) return Status::from_errno(errno, "serve: memfd_create");
      }
      const char* from = static_cast<const char*>(attachment.data());
      for (std::uint64_t done = 0; done < length;) {
        ssize_t n = ::pwrite(memfd.get(), from + done, length - done, static_cast<off_t>(memfd_end + done));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return Status::from_errno(n < 0 ? errno : EIO, "serve: writing a memfd");
        done += static_cast<std::uint64_t>(n);
      }
      memfd_end = page_round(memfd_end + length);
      length |= kInMemfd;
    }
    lengths.push_back(length);
  }
  // Sealed as the agent requires of a worker's: its size and bytes are final.
  if (memfd.valid() && ::fcntl(memfd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) != 0) {
    return Status::from_errno(errno, "serve: sealing a memfd");
  }
  std::string prefix = encode_prefix(packed.size(), lengths);
  std::vector<iovec> parts;
  parts.push_back({prefix.data(), prefix.size()});
  parts.push_back({packed.data(), packed.size()});
  for (const auto& attachment : attachments) {
    if (attachment.size() && attachment.size() < memfd_threshold()) {
      parts.push_back({const_cast<void*>(attachment.data()), attachment.size()});
    }
  }
  return send_parts(fd, std::move(parts), target && memfd_end ? target->fd : memfd.get());
}

bool try_write_message(int fd, const nlohmann::json& body, const std::vector<zmq::message_t>& attachments) {
  std::string packed;
  nlohmann::json::to_msgpack(body, packed);
  std::vector<std::uint64_t> lengths;
  std::size_t total = kPrefixBytes + 8 * attachments.size() + packed.size();
  for (const auto& attachment : attachments) {
    if (attachment.size() >= memfd_threshold()) return false;
    lengths.push_back(attachment.size());
    total += attachment.size();
  }
  // Room for the whole message, so that the kernel takes all of it at once
  // (its accounting adds some overhead to the bytes queued; hence the margin).
  int queued = 0, capacity = 0;
  socklen_t size = sizeof capacity;
  if (::ioctl(fd, SIOCOUTQ, &queued) != 0 || ::getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &capacity, &size) != 0) return false;
  if (static_cast<std::size_t>(queued) + 2 * total + 4096 > static_cast<std::size_t>(capacity)) return false;
  std::string prefix = encode_prefix(packed.size(), lengths);
  std::vector<iovec> parts = {{prefix.data(), prefix.size()}, {packed.data(), packed.size()}};
  for (const auto& attachment : attachments) {
    if (attachment.size()) parts.push_back({const_cast<void*>(attachment.data()), attachment.size()});
  }
  msghdr message{};
  message.msg_iov = parts.data();
  message.msg_iovlen = std::min<std::size_t>(parts.size(), IOV_MAX);
  ssize_t n;
  do {
    n = ::sendmsg(fd, &message, MSG_NOSIGNAL | MSG_DONTWAIT);
  } while (n < 0 && errno == EINTR);
  if (n <= 0) return false;
  std::size_t first = skip_sent(parts, 0, static_cast<std::size_t>(n));
  if (first < parts.size()) {
    // Begun: the rest must follow. A failure here is the worker's end, which its reader sees.
    (void)send_parts(fd, std::vector<iovec>(parts.begin() + static_cast<std::ptrdiff_t>(first), parts.end()), -1);
  }
  return true;
}

std::optional<std::pair<WireMessage, std::size_t>> parse_whole_message(std::string_view bytes) {
  if (bytes.size() < kPrefixBytes) return std::nullopt;
  auto prefix = parse_prefix(bytes.substr(0, kPrefixBytes));
  if (!prefix) return std::nullopt;
  std::size_t at = kPrefixBytes + 8ull * prefix->attachments;
  if (bytes.size() < at) return std::nullopt;
  auto lengths = parse_lengths(bytes.substr(kPrefixBytes, at - kPrefixBytes), prefix->attachments);
  if (!lengths) return std::nullopt;
  std::size_t end = at + prefix->body_bytes;
  for (std::uint64_t length : *lengths) {
    if (length & kInMemfd) return std::nullopt;
    end += length;
  }
  if (bytes.size() < end) return std::nullopt;
  auto body = rpc::decode_body(bytes.substr(at, prefix->body_bytes), kMaxBodyBytes);
  if (!body) return std::nullopt;
  WireMessage message;
  message.body = std::move(*body);
  at += prefix->body_bytes;
  for (std::uint64_t length : *lengths) {
    message.attachments.emplace_back(bytes.data() + at, static_cast<std::size_t>(length));
    at += length;
  }
  return std::make_pair(std::move(message), end);
}

Result<std::optional<WireMessage>> read_message(int fd, int abort_fd, std::shared_ptr<ReleaseList> unmapped) {
  char head[kPrefixBytes];
  std::vector<Fd> passed;
  auto got = read_exact(fd, abort_fd, head, sizeof head, &passed);
  if (!got) return got.status();
  if (*got != Got::bytes) return std::optional<WireMessage>();
  auto prefix = parse_prefix(std::string_view(head, sizeof head));
  if (!prefix) return prefix.status();
  std::string table(8ull * prefix->attachments, '\0');
  if (Status read = read_rest(fd, abort_fd, table.data(), table.size()); !read) return read;
  auto lengths = parse_lengths(table, prefix->attachments);
  if (!lengths) return lengths.status();
  std::string packed(prefix->body_bytes, '\0');
  if (Status read = read_rest(fd, abort_fd, packed.data(), packed.size()); !read) return read;
  auto body = rpc::decode_body(packed, kMaxBodyBytes);
  if (!body) return body.status();
  WireMessage message;
  message.body = std::move(*body);
  std::uint64_t extent = 0, needed = 0;  // where the last attachment in the memfd ends: rounded, exact
  for (std::uint64_t length : *lengths) {
    if (!(length & kInMemfd)) continue;
    needed = extent + (length & ~kInMemfd);
    extent = page_round(needed);
  }
  std::shared_ptr<MessageUse> use;
  if (extent) {
    auto mapping = memfd_mapping(passed, needed, unmapped.get());
    if (!mapping) return mapping.status();
    use = std::make_shared<MessageUse>();  // in place: a copy's end would report the memfd released
    use->mapping = std::move(*mapping);
    use->list = std::move(unmapped);
  }
  std::uint64_t memfd_end = 0;
  for (std::uint64_t length : *lengths) {
    if (length & kInMemfd) {
      length &= ~kInMemfd;
      // A frame on the mapping's bytes, not a copy of them.
      if (length) {
        message.attachments.emplace_back(use->mapping->data + memfd_end, static_cast<std::size_t>(length), drop_use,
                                         new std::shared_ptr<MessageUse>(use));
      } else {
        message.attachments.emplace_back();
      }
      memfd_end = page_round(memfd_end + length);
      continue;
    }
    zmq::message_t frame(static_cast<std::size_t>(length));
    if (Status read = read_rest(fd, abort_fd, frame.data(), frame.size()); !read) return read;
    message.attachments.push_back(std::move(frame));
  }
  return std::optional<WireMessage>(std::move(message));
}

}  // namespace gpubox::serve
