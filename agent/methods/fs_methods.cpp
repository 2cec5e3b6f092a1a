// fs.* methods (rpc/PROTOCOL.md, "Files"): params and streaming here, the
// filesystem steps in fs_ops. Each handler runs on one worker thread.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <limits>

#include "agent/methods/fs_ops.h"
#include "agent/methods/methods.h"
#include "rpc/inbound_stream.h"
#include "rpc/params.h"
#include "rpc/shared_frame.h"

namespace gpubox {
namespace {

using nlohmann::json;

constexpr std::size_t kChunkBytes = 1 << 20;        // DATA chunk size; also the inline-reply limit
constexpr std::uint64_t kUploadWindow = 16;          // DATA the agent lets an uploader send ahead
constexpr std::size_t kMaxListEntries = 100'000;
constexpr int kMaxListDepth = 256;
constexpr auto kUploadIdleLimit = std::chrono::seconds(300);
constexpr std::int64_t kMaxInt64 = std::numeric_limits<std::int64_t>::max();

// A malloc'd buffer shared by ZeroMQ (which sends it without a copy) and the
// hasher; freed by whichever lets go last.
using ChunkBuffer = std::shared_ptr<char>;

struct Chunk {
  ChunkBuffer data;
  std::size_t size = 0;
  std::uint64_t offset = 0;

  zmq::message_t to_message() const { return rpc::shared_frame(data, size); }
};

// Reads a file range in chunks, trusting EOF rather than st_size (so /proc
// files and files that grow meanwhile read correctly).
class RangeReader {
 public:
  RangeReader(int fd, std::uint64_t offset, std::uint64_t length, std::string path)
      : fd_(fd), position_(offset), remaining_(length), path_(std::move(path)) {}

  // The next chunk: full (kChunkBytes) unless the range or the file ended; size 0 at the end.
  Result<Chunk> next() {
    Chunk chunk;
    chunk.offset = position_;
    std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(kChunkBytes, remaining_));
    if (want == 0) return chunk;
    char* buffer = static_cast<char*>(std::malloc(want));
    if (!buffer) return Status(ErrorCode::resource_exhausted, "out of memory for a read buffer");
    chunk.data = ChunkBuffer(buffer, std::free);
    while (chunk.size < want) {
      ssize_t n = ::pread(fd_, chunk.data.get() + chunk.size, want - chunk.size, static_cast<off_t>(position_));
      if (n < 0) {
        if (errno == EINTR) continue;
        return Status::from_errno(errno, "params.path: cannot read " + path_);
      }
      if (n == 0) {
        remaining_ = 0;  // EOF
        break;
      }
      chunk.size += static_cast<std::size_t>(n);
      position_ += static_cast<std::uint64_t>(n);
      remaining_ -= static_cast<std::uint64_t>(n);
    }
    return chunk;
  }
  bool done() const { return remaining_ == 0; }

 private:
  int fd_;
  std::uint64_t position_;
  std::uint64_t remaining_;
  std::string path_;
};

Result<json> fs_read(rpc::CallContext& call) {
  rpc::ParamReader params(call.params());
  auto path = params.path("path");
  auto offset = params.integer("offset", 0, kMaxInt64);
  auto length = params.integer("length", 0, kMaxInt64);
  if (Status status = params.finish(); !status) return status;
  // O_NONBLOCK: opening a FIFO must not hang; it is refused just below.
  Fd fd(::open(path->c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK));
  if (!fd.valid()) return Status::from_errno(errno, "params.path: cannot open " + *path);
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return Status::from_errno(errno, "params.path: cannot stat " + *path);
  if (S_ISDIR(st.st_mode)) return Status(ErrorCode::invalid_request, "params.path: " + *path + " is a directory; fs.list lists it");
  if (!S_ISREG(st.st_mode)) {
    return Status(ErrorCode::invalid_request, "params.path: " + *path + " is not a regular file (fifo, socket or device)");
  }
  std::uint64_t start = static_cast<std::uint64_t>(offset.value_or(0));
  std::uint64_t span = length ? static_cast<std::uint64_t>(*length) : std::numeric_limits<std::uint64_t>::max();
  ::posix_fadvise(fd.get(), static_cast<off_t>(start), 0, POSIX_FADV_SEQUENTIAL);
  RangeReader reader(fd.get(), start, span, *path);

  auto first = reader.next();
  if (!first) return first.status();
  // One chunk or less: answer inline. A full first chunk needs a look ahead
  // to tell "exactly 1 MiB" from "more".
  std::optional<Chunk> second;
  if (first->size == kChunkBytes && !reader.done()) {
    auto ahead = reader.next();
    if (!ahead) return ahead.status();
    if (ahead->size > 0) second = std::move(*ahead);
  }
  if (!second) {
    Sha256 hash;
    hash.update(first->data.get(), first->size);
    return json{{"size", first->size},
                {"data", rpc::binary(std::string_view(first->data.get(), first->size))},
                {"sha256", hash.hex_digest()}};
  }

  // Streamed: hashed on its own thread while this one reads the next chunk
  // (at most 4 chunks behind, held beyond the client's window).
  BackgroundSha256 hash(4);
  std::uint64_t total = 0;
  auto send = [&](Chunk&& chunk) -> Status {
    hash.update(chunk.data, chunk.data.get(), chunk.size);
    total += chunk.size;
    std::uint64_t at = chunk.offset;
    std::vector<zmq::message_t> attachments;
    attachments.push_back(chunk.to_message());
    // Waits while the client has no credit: a slow reader holds the agent
    // to its window, never to a growing buffer.
    return call.send_data(json{{"offset", at}}, std::move(attachments));
  };
  if (Status sent = send(std::move(*first)); !sent) return sent;
  Chunk current = std::move(*second);
  while (true) {
    bool last = current.size < kChunkBytes || reader.done();
    if (Status sent = send(std::move(current)); !sent) return sent;
    if (last) break;
    auto next = reader.next();
    if (!next) return next.status();
    if (next->size == 0) break;
    current = std::move(*next);
  }
  return json{{"size", total}, {"sha256", hash.hex_digest()}};
}

// Receives the streamed content of fs.write into file until DATA {"eof": true}.
Status receive_upload(rpc::CallContext& call, fs::AtomicFile& file, std::optional<std::uint64_t> expected_size) {
  auto take_item = [&](rpc::Incoming& input) -> Result<bool> {
    rpc::ParamReader fields(input.body);
    auto eof = fields.boolean("eof");
    auto data = fields.bytes("data");
    if (Status status = fields.finish(); !status) {
      return Status(status.code(), "DATA body: " + status.message() + " (expected {\"eof\"?: bool, \"data\"?: bytes})");
    }
    // Each buffer is moved into a shared owner (no copy): the file's hasher holds it until hashed.
    auto append = [&](std::shared_ptr<const void> owner, const void* bytes, std::size_t size) -> Status {
      if (expected_size && file.size() + size > *expected_size) {
        return Status(ErrorCode::input_changed, "params.size: more than " + std::to_string(*expected_size) +
                                                    " bytes arrived; the target was left unchanged");
      }
      return file.write(std::move(owner), bytes, size);
    };
    if (data) {
      auto owned = std::make_shared<std::string>(std::move(*data));
      if (Status written = append(owned, owned->data(), owned->size()); !written) return written;
    }
    for (auto& attachment : input.attachments) {
      auto owned = std::make_shared<zmq::message_t>(std::move(attachment));
      if (Status written = append(owned, owned->data(), owned->size()); !written) return written;
    }
    return eof.value_or(false);
  };
  rpc::InboundStream stream(call, {.window = kUploadWindow});
  return stream.read_all(kUploadIdleLimit, "the upload was abandoned and the target left unchanged", take_item);
}

Result<json> fs_write(rpc::CallContext& call) {
  rpc::ParamReader params(call.params());
  auto path = params.path("path");
  auto data = params.bytes("data");
  auto mode = params.integer("mode", 0, 07777);
  auto parents = params.boolean("parents");
  auto sha256 = params.string("sha256");
  auto size = params.integer("size", 0, kMaxInt64);
  if (Status status = params.finish(); !status) return status;
  if (sha256 && !normalize_sha256_hex(*sha256)) {
    return Status(ErrorCode::invalid_request, "params.sha256: expected 64 hex digits, got \"" + sha256->substr(0, 80) + "\"");
  }
  if (data && !call.attachments().empty()) {
    return Status(ErrorCode::invalid_request, "params.data: give the content either as data or as the CALL's attachments, not both");
  }
  bool inline_content = data.has_value() || !call.attachments().empty();
  auto file = fs::AtomicFile::create(*path, static_cast<mode_t>(mode.value_or(0644)), parents.value_or(false));
  if (!file) return file.status();
  std::optional<std::uint64_t> expected_size;
  if (size) expected_size = static_cast<std::uint64_t>(*size);
  if (inline_content) {
    if (data) {
      auto owned = std::make_shared<std::string>(std::move(*data));
      if (Status written = (*file)->write(owned, owned->data(), owned->size()); !written) return written;
    }
    for (auto& attachment : call.attachments()) {
      auto owned = std::make_shared<zmq::message_t>(std::move(attachment));
      if (Status written = (*file)->write(owned, owned->data(), owned->size()); !written) return written;
    }
  } else if (Status received = receive_upload(call, **file, expected_size); !received) {
    return received;
  }
  std::uint64_t written = (*file)->size();
  std::string digest = (*file)->sha256_hex();
  if (expected_size && written != *expected_size) {
    return Status(ErrorCode::input_changed, "params.size: expected " + std::to_string(*expected_size) + " bytes, received " +
                                                std::to_string(written) + "; the target was left unchanged");
  }
  if (sha256 && digest != *sha256) {
    return Status(ErrorCode::input_changed, "params.sha256: the content received hashes to " + digest + ", not " + *sha256 +
                                                "; the target was left unchanged");
  }
  if (Status stopped = call.stop_reason(); !stopped) return stopped;
  if (Status committed = (*file)->commit(); !committed) return committed;
  return json{{"size", written}, {"sha256", digest}};
}

Result<json> fs_list(rpc::CallContext& call) {
  rpc::ParamReader params(call.params());
  auto path = params.path("path");
  auto depth = params.integer("depth", 1, kMaxListDepth);
  if (Status status = params.finish(); !status) return status;
  return fs::list_tree(*path, static_cast<int>(depth.value_or(1)), kMaxListEntries);
}

Result<json> fs_stat(rpc::CallContext& call) {
  rpc::ParamReader params(call.params());
  auto path = params.path("path");
  if (Status status = params.finish(); !status) return status;
  return fs::stat_path(*path);
}

Result<json> fs_mkdir(rpc::CallContext& call) {
  rpc::ParamReader params(call.params());
  auto path = params.path("path");
  auto parents = params.boolean("parents");
  auto mode = params.integer("mode", 0, 07777);
  if (Status status = params.finish(); !status) return status;
  if (Status made = fs::make_directory(*path, static_cast<mode_t>(mode.value_or(0755)), parents.value_or(false)); !made) return made;
  return json::object();
}

Result<json> fs_remove(rpc::CallContext& call) {
  rpc::ParamReader params(call.params());
  auto path = params.path("path");
  auto recursive = params.boolean("recursive");
  if (Status status = params.finish(); !status) return status;
  if (Status removed = fs::remove_path(*path, recursive.value_or(false)); !removed) return removed;
  return json::object();
}

Result<json> fs_move(rpc::CallContext& call) {
  rpc::ParamReader params(call.params());
  auto from = params.path("from");
  auto to = params.path("to");
  auto overwrite = params.boolean("overwrite");
  if (Status status = params.finish(); !status) return status;
  if (Status moved = fs::move_path(*from, *to, overwrite.value_or(false)); !moved) return moved;
  return json::object();
}

}  // namespace

void add_fs_methods(rpc::MethodRegistry& methods) {
  methods.add("fs.read", fs_read);
  methods.add("fs.write", fs_write);
  methods.add("fs.list", fs_list);
  methods.add("fs.stat", fs_stat);
  methods.add("fs.mkdir", fs_mkdir);
  methods.add("fs.remove", fs_remove);
  methods.add("fs.move", fs_move);
}

}  // namespace gpubox
