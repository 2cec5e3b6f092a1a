#include "host/harvest/archive_download.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <memory>

#include "base/background_sha256.h"
#include "base/fd.h"

namespace gpubox::harvest {
namespace {

// An owned descriptor for the partial file.
class PartialFile {
 public:
  explicit PartialFile(int fd) : fd_(fd) {}
  ~PartialFile() {
    if (fd_ >= 0) ::close(fd_);
  }
  PartialFile(const PartialFile&) = delete;
  PartialFile& operator=(const PartialFile&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

Status write_all(int fd, const void* data, std::size_t size, const std::string& path) {
  if (int failed = write_fully(fd, data, size)) return Status::from_errno(failed, "cannot write " + path);
  return Status::ok();
}

// Hashes the first `size` bytes already in the file.
Status hash_prefix(int fd, std::uint64_t size, BackgroundSha256& hash, const std::string& path) {
  std::uint64_t at = 0;
  while (at < size) {
    auto buffer = std::make_shared<std::string>(static_cast<std::size_t>(std::min<std::uint64_t>(1 << 20, size - at)), '\0');
    ssize_t n = ::pread(fd, buffer->data(), buffer->size(), static_cast<off_t>(at));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Status::from_errno(n < 0 ? errno : EIO, "cannot read " + path);
    const char* bytes = buffer->data();
    hash.update(std::move(buffer), bytes, static_cast<std::size_t>(n));
    at += static_cast<std::uint64_t>(n);
  }
  return Status::ok();
}

}  // namespace

Result<DownloadResult> download_job_archive(rpc::Client& client, const DownloadOptions& options) {
  std::string partial = options.destination + ".partial";
  PartialFile file(::open(partial.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  if (file.get() < 0) return Status::from_errno(errno, "cannot open " + partial);
  struct stat st;
  if (::fstat(file.get(), &st) != 0) return Status::from_errno(errno, "cannot stat " + partial);
  std::uint64_t offset = static_cast<std::uint64_t>(st.st_size);

  auto run = [&](std::uint64_t from) -> Result<DownloadResult> {
    // Hashed on its own thread while this one writes: the two overlap.
    BackgroundSha256 hash;
    if (Status hashed = hash_prefix(file.get(), from, hash, partial); !hashed) return hashed;
    if (::ftruncate(file.get(), static_cast<off_t>(from)) != 0) return Status::from_errno(errno, "cannot truncate " + partial);
    if (::lseek(file.get(), static_cast<off_t>(from), SEEK_SET) < 0) return Status::from_errno(errno, "cannot seek " + partial);
    nlohmann::json params = {{"job_id", options.job_id}, {"offset", from}};
    if (options.max_bytes) params["max_bytes"] = *options.max_bytes;
    rpc::CallOptions call;
    call.window = options.window;
    auto opened = client.stream("job.download", params, std::move(call));
    if (!opened) return opened.status();
    rpc::Stream& stream = **opened;
    std::uint64_t position = from;
    while (true) {
      auto next = stream.next();
      if (!next) return next.status();
      if (!next->has_value()) break;
      rpc::Incoming& chunk = **next;
      std::uint64_t at = chunk.body.value("offset", std::uint64_t{0});
      if (at != position) {
        return Status(ErrorCode::internal, "job.download sent a chunk at offset " + std::to_string(at) + ", expected " +
                                               std::to_string(position));
      }
      for (auto& attachment : chunk.attachments) {
        auto bytes = std::make_shared<zmq::message_t>(std::move(attachment));
        hash.update(bytes, bytes->data(), bytes->size());
        if (Status written = write_all(file.get(), bytes->data(), bytes->size(), partial); !written) return written;
        position += bytes->size();
      }
      if (options.progress) options.progress(position, 0);
    }
    const auto& final = stream.result();
    if (!final) return final.status();
    DownloadResult result;
    result.size = final.value().value("size", std::uint64_t{0});
    result.sha256 = final.value().value("sha256", "");
    result.manifest = final.value().value("manifest", nlohmann::json::object());
    result.resumed_from = from;
    std::string digest = hash.hex_digest();
    if (position != result.size || digest != result.sha256) {
      ::unlink(partial.c_str());
      return Status(ErrorCode::input_changed, "the archive of " + options.job_id + " arrived as " + std::to_string(position) +
                                                  " bytes hashing to " + digest + ", but the agent's manifest says " +
                                                  std::to_string(result.size) + " bytes, " + result.sha256 +
                                                  "; the partial file was removed: download again");
    }
    if (options.progress) options.progress(position, result.size);
    return result;
  };

  auto result = run(offset);
  // A partial file longer than the archive (from another job, or a restaged
  // one) cannot be resumed: start afresh once.
  if (!result && result.status().code() == ErrorCode::invalid_request && offset > 0 &&
      result.status().message().find("params.offset") != std::string::npos) {
    result = run(0);
  }
  if (!result) {
    // Keep a partial file only when it holds something to resume from.
    struct stat now;
    if (::fstat(file.get(), &now) == 0 && now.st_size == 0) ::unlink(partial.c_str());
    return result;
  }
  if (::fsync(file.get()) != 0) return Status::from_errno(errno, "cannot fsync " + partial);
  if (::rename(partial.c_str(), options.destination.c_str()) != 0) {
    return Status::from_errno(errno, "cannot rename " + partial + " to " + options.destination);
  }
  return result;
}

}  // namespace gpubox::harvest
