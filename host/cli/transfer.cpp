// `gpubox put ID LOCAL REMOTE` and `gpubox get ID REMOTE LOCAL`: files and
// directory trees, streamed in 1 MiB chunks, sha256-checked end to end, with a
// progress bar on a terminal for large transfers. Remote writes are atomic per
// file (fs.write); local ones go to a temp file renamed into place.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>

#include "host/cli/cli.h"
#include "host/cli/progress.h"
#include "base/background_sha256.h"
#include "base/terminal_text.h"
#include "rpc/shared_frame.h"

namespace gpubox::host::cli {
namespace {

namespace fs = std::filesystem;

constexpr size_t kPutChunk = 1 << 20;
constexpr std::uint64_t kInlineMax = 4 << 20;     // one CALL with the content as an attachment

std::string file_name_of(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string join(const std::string& dir, const std::string& name) {
  return dir.empty() || dir.back() == '/' ? dir + name : dir + "/" + name;
}

// Up to max bytes read into a buffer of their own (shared by the frame that
// sends them and the SHA-256 thread that hashes them: no copy of either).
struct Chunk {
  std::shared_ptr<char> bytes;
  std::size_t size = 0;
};

Result<Chunk> read_chunk(int fd, std::size_t max) {
  Chunk chunk;
  chunk.bytes.reset(static_cast<char*>(std::malloc(max ? max : 1)), std::free);
  if (!chunk.bytes) return Status(ErrorCode::resource_exhausted, "out of memory for a read buffer");
  while (chunk.size < max) {
    ssize_t n = ::read(fd, chunk.bytes.get() + chunk.size, max - chunk.size);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::from_errno(errno, "read");
    if (n == 0) break;
    chunk.size += static_cast<std::size_t>(n);
  }
  return chunk;
}

Status put_file(rpc::Client& client, const std::string& local, const std::string& remote, bool parents, Progress& progress) {
  int fd = ::open(local.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::from_errno(errno, "cannot read '" + local + "'");
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  ::fstat(fd, &st);
  auto size = static_cast<std::uint64_t>(st.st_size);
  nlohmann::json params = {{"path", remote}, {"mode", st.st_mode & 07777}, {"size", size}, {"parents", parents}};
  BackgroundSha256 sha(4);  // hashes each chunk while the next is read and sent
  Result<nlohmann::json> result = nlohmann::json();
  if (size <= kInlineMax) {
    auto content = read_chunk(fd, size);
    if (!content) return Status(content.status().code(), "cannot read '" + local + "': " + content.status().message());
    sha.update(content->bytes, content->bytes.get(), content->size);
    rpc::CallOptions options;
    std::vector<zmq::message_t> attachments;
    if (content->size == 0) {
      params["data"] = nlohmann::json::binary({});
    } else {
      attachments.push_back(rpc::shared_frame(content->bytes, content->size));
      options.attachments = &attachments;
    }
    result = client.call("fs.write", params, options);
    progress.add(size);
  } else {
    auto stream = client.stream("fs.write", params);
    if (!stream) return stream.status();
    std::uint64_t sent = 0;
    while (true) {
      auto chunk = read_chunk(fd, kPutChunk);
      if (!chunk) return Status(chunk.status().code(), "cannot read '" + local + "': " + chunk.status().message());
      sha.update(chunk->bytes, chunk->bytes.get(), chunk->size);
      sent += chunk->size;
      bool last = chunk->size < kPutChunk || sent >= size;
      std::vector<zmq::message_t> attachments;
      if (chunk->size > 0) attachments.push_back(rpc::shared_frame(chunk->bytes, chunk->size));
      nlohmann::json body = last ? nlohmann::json{{"eof", true}} : nlohmann::json::object();
      Status status = (*stream)->send(body, std::move(attachments));
      if (!status) break;  // the request ended early: its result says why
      progress.add(chunk->size);
      if (last) break;
    }
    while (true) {
      auto next = (*stream)->next();
      if (!next) return next.status();
      if (!next->has_value()) break;
    }
    result = (*stream)->result();
  }
  if (!result) return result.status();
  std::string local_sha = sha.hex_digest();
  if (result->value("sha256", "") != local_sha) {
    return Status(ErrorCode::input_changed, "'" + local + "' changed while it was sent (sha256 mismatch)");
  }
  return Status::ok();
}

Status get_file(rpc::Client& client, const std::string& remote, const std::string& local, int mode, Progress& progress) {
  std::string temp = join(fs::path(local).parent_path().string(), "." + file_name_of(local) + ".gpubox-XXXXXX");
  int fd = ::mkstemp(temp.data());
  if (fd < 0) return Status::from_errno(errno, "cannot write '" + local + "'");
  auto abandon = [&](Status status) {
    ::close(fd);
    ::unlink(temp.c_str());
    return status;
  };
  auto stream = client.stream("fs.read", {{"path", remote}});
  if (!stream) return abandon(stream.status());
  BackgroundSha256 sha(4);  // hashes each chunk while this thread writes it
  // owner keeps data alive until it is hashed.
  auto write_bytes = [&](std::shared_ptr<const void> owner, const void* data, std::size_t size) -> Status {
    sha.update(std::move(owner), data, size);
    const char* at = static_cast<const char*>(data);
    while (size > 0) {
      ssize_t n = ::write(fd, at, size);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return Status::from_errno(errno, "cannot write '" + local + "'");
      at += n;
      size -= static_cast<std::size_t>(n);
      progress.add(static_cast<std::uint64_t>(n));
    }
    return Status::ok();
  };
  while (true) {
    auto next = (*stream)->next();
    if (!next) return abandon(next.status());
    if (!next->has_value()) break;
    for (auto& attachment : (*next)->attachments) {
      auto bytes = std::make_shared<zmq::message_t>(std::move(attachment));
      if (Status written = write_bytes(bytes, bytes->data(), bytes->size()); !written) {
        (void)(*stream)->cancel();
        return abandon(written);
      }
    }
  }
  const auto& result = (*stream)->result();
  if (!result) return abandon(result.status());
  if (result->contains("data")) {
    const auto& data = result.value()["data"];
    // The result outlives the hashing (sha's digest is taken below): no owner needed.
    if (data.is_binary()) {
      if (Status written = write_bytes(nullptr, data.get_binary().data(), data.get_binary().size()); !written) return abandon(written);
    } else if (data.is_string()) {
      const auto& text = data.get_ref<const std::string&>();
      if (Status written = write_bytes(nullptr, text.data(), text.size()); !written) return abandon(written);
    }
  }
  if (sha.hex_digest() != result->value("sha256", "")) {
    return abandon(Status(ErrorCode::input_changed, "'" + remote + "' changed while it was read (sha256 mismatch)"));
  }
  ::fchmod(fd, static_cast<mode_t>(mode & 07777));
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    ::unlink(temp.c_str());
    return Status::from_errno(errno, "cannot write '" + local + "'");
  }
  if (::rename(temp.c_str(), local.c_str()) != 0) {
    int error = errno;
    ::unlink(temp.c_str());
    return Status::from_errno(error, "cannot write '" + local + "'");
  }
  return Status::ok();
}

Status remote_mkdir(rpc::Client& client, const std::string& path, bool parents) {
  auto made = client.call("fs.mkdir", {{"path", path}, {"parents", parents}});
  if (!made && made.status().code() == ErrorCode::already_exists) {
    auto st = client.call("fs.stat", {{"path", path}});
    if (st && st->value("type", "") == "dir") return Status::ok();
  }
  return made.status();
}

struct Totals {
  std::uint64_t files = 0;
  std::uint64_t bytes = 0;
};

void report(const Global& global, const Args& args, const std::string& target, const Totals& totals) {
  if (global.json || args.flag("--json")) {
    std::cout << nlohmann::json{{"target", target}, {"files", totals.files}, {"bytes", totals.bytes}}.dump() << "\n";
  }
}

}  // namespace

int run_put(const std::vector<std::string>& raw, const Global& global) {
  constexpr char kUsage[] =
      "usage: gpubox put ID|NAME LOCAL REMOTE [-p|--parents] [--json]   (a relative REMOTE is under /workspace)\n"
      "  --parents  create REMOTE's missing parent directories\n";
  auto args = parse_args(raw, {}, {"-p", "--parents"});
  if (!args) return fail_usage("put", args.status());
  if (args->flag("--help")) return show_usage(kUsage);
  if (args->positional.size() != 3) return fail_usage("put", "expected ID LOCAL REMOTE");
  const std::string& local = args->positional[1];
  std::error_code error;
  auto status = fs::status(local, error);
  if (error || !fs::exists(status)) {
    return fail("put", "cannot read '" + local + "': " + (error ? error.message() : "no such file or directory"), kExitUsage);
  }
  Totals totals;
  if (fs::is_directory(status)) {
    for (auto it = fs::recursive_directory_iterator(local, error); !error && it != fs::end(it); it.increment(error)) {
      if (it->is_regular_file(error)) totals.bytes += it->file_size(error);
    }
  } else if (fs::is_regular_file(status)) {
    totals.bytes = fs::file_size(local, error);
  } else {
    return fail("put", "'" + local + "' is neither a file nor a directory", kExitUsage);
  }
  auto record = find_sandbox(args->positional[0]);
  if (!record) return fail("put", record.status(), exit_code_for(record.status()));
  auto client = connect_sandbox(*record);
  if (!client) return fail("put", client.status(), kExitUnreachable);
  rpc::Client& c = **client;

  std::string target = remote_path(args->positional[2]);
  auto remote_stat = c.call("fs.stat", {{"path", target}});
  if (remote_stat && remote_stat->value("type", "") == "dir") target = join(target, file_name_of(local));
  bool parents = args->flag("-p") || args->flag("--parents");
  Progress progress(totals.bytes, file_name_of(local));
  auto failed = [&](const Status& why) {
    std::string parent = fs::path(target).parent_path().string();
    if (why.code() == ErrorCode::not_found && !parents) {
      auto parent_stat = c.call("fs.stat", {{"path", parent}});
      if (!parent_stat && parent_stat.status().code() == ErrorCode::not_found) {
        return fail("put", "the sandbox has no directory '" + parent + "': give --parents to create it", kExitFailed);
      }
    }
    return fail("put", why.to_string(), kExitFailed);
  };
  if (!fs::is_directory(status)) {
    if (Status put = put_file(c, local, target, parents, progress); !put) return failed(put);
    totals.files = 1;
    report(global, *args, target, totals);
    return kExitOk;
  }
  if (Status made = remote_mkdir(c, target, parents); !made) return failed(made);
  fs::path root(local);
  for (auto it = fs::recursive_directory_iterator(root, error); !error && it != fs::end(it); it.increment(error)) {
    std::string relative = fs::relative(it->path(), root).string();
    std::string remote = join(target, relative);
    if (it->is_symlink(error)) {
      std::fprintf(stderr, "gpubox put: skipped the symlink '%s'\n", escape_for_terminal(it->path().string()).c_str());
    } else if (it->is_directory(error)) {
      if (Status made = remote_mkdir(c, remote, true); !made) return failed(made);
    } else if (it->is_regular_file(error)) {
      if (Status put = put_file(c, it->path().string(), remote, false, progress); !put) return failed(put);
      ++totals.files;
    } else {
      std::fprintf(stderr, "gpubox put: skipped '%s': not a regular file\n", escape_for_terminal(it->path().string()).c_str());
    }
  }
  if (error) return fail("put", "cannot read '" + local + "': " + error.message(), kExitFailed);
  report(global, *args, target, totals);
  return kExitOk;
}

int run_get(const std::vector<std::string>& raw, const Global& global) {
  constexpr char kUsage[] = "usage: gpubox get ID|NAME REMOTE LOCAL [--json]   (a relative REMOTE is under /workspace)\n";
  auto args = parse_args(raw, {}, {});
  if (!args) return fail_usage("get", args.status());
  if (args->flag("--help")) return show_usage(kUsage);
  if (args->positional.size() != 3) return fail_usage("get", "expected ID REMOTE LOCAL");
  auto record = find_sandbox(args->positional[0]);
  if (!record) return fail("get", record.status(), exit_code_for(record.status()));
  auto client = connect_sandbox(*record);
  if (!client) return fail("get", client.status(), kExitUnreachable);
  rpc::Client& c = **client;
  auto failed = [&](const Status& why) { return fail("get", why.to_string(), kExitFailed); };

  std::string remote = remote_path(args->positional[1]);
  while (remote.size() > 1 && remote.back() == '/') remote.pop_back();
  auto st = c.call("fs.stat", {{"path", remote}});
  if (!st) return failed(st.status());
  std::string local = args->positional[2];
  std::error_code error;
  if (fs::is_directory(local, error)) local = join(local, file_name_of(remote));
  Totals totals;
  std::string type = st->value("type", "");
  if (type == "file" || type == "symlink") {
    totals.bytes = st->value("size", 0ULL);
    Progress progress(totals.bytes, file_name_of(remote));
    if (Status got = get_file(c, remote, local, st->value("mode", 0644), progress); !got) return failed(got);
    totals.files = 1;
    report(global, *args, local, totals);
    return kExitOk;
  }
  if (type != "dir") return fail("get", "'" + remote + "' is neither a file nor a directory", kExitFailed);
  auto listing = c.call("fs.list", {{"path", remote}, {"depth", 256}});
  if (!listing) return failed(listing.status());
  if (listing->value("truncated", false)) return fail("get", "'" + remote + "' holds more than 100000 entries", kExitFailed);
  const auto& entries = (*listing)["entries"];
  for (const auto& entry : entries) {
    if (entry.value("type", "") == "file") totals.bytes += entry.value("size", 0ULL);
  }
  if (::mkdir(local.c_str(), static_cast<mode_t>(st->value("mode", 0755) & 07777)) != 0 && errno != EEXIST) {
    return fail("get", "cannot create '" + local + "': " + std::strerror(errno), kExitFailed);
  }
  Progress progress(totals.bytes, file_name_of(remote));
  for (const auto& entry : entries) {
    std::string path = entry.value("path", "");
    if (path.rfind(remote + "/", 0) != 0) continue;
    std::string target = join(local, path.substr(remote.size() + 1));
    std::string entry_type = entry.value("type", "");
    if (entry_type == "dir") {
      if (::mkdir(target.c_str(), static_cast<mode_t>(entry.value("mode", 0755) & 07777)) != 0 && errno != EEXIST) {
        return fail("get", "cannot create '" + target + "': " + std::strerror(errno), kExitFailed);
      }
    } else if (entry_type == "file") {
      if (Status got = get_file(c, path, target, entry.value("mode", 0644), progress); !got) return failed(got);
      ++totals.files;
    } else {
      // Names and types from the sandbox's listing: nothing in them acts on the terminal.
      std::fprintf(stderr, "gpubox get: skipped '%s': a %s\n", escape_for_terminal(path).c_str(),
                   escape_for_terminal(entry_type).c_str());
    }
  }
  report(global, *args, local, totals);
  return kExitOk;
}

}  // namespace gpubox::host::cli
