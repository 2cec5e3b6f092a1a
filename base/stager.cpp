#include "base/stager.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <cstring>
#include <memory>
#include <thread>

#include "base/parallel_zstd.h"
#include "base/fd.h"
#include "base/sha256.h"
#include "base/thread_annotations.h"

namespace gpubox::jobs {
namespace {

constexpr std::size_t kReadBytes = 1 << 20;

struct ArchiveFree {
  void operator()(struct archive* a) const { archive_write_free(a); }
};
struct EntryFree {
  void operator()(archive_entry* e) const { archive_entry_free(e); }
};

// The archive's output: a file, hashed and counted as it is written, on a
// writer thread of its own so that hashing and write(2) overlap with reading
// and compressing. Written ranges are handed to the disk as they fill
// (sync_file_range), so the closing fsync waits for the last few MiB only.
// At most kQueuedBlocks copies wait; the first failed write stops the writer
// and fails the next write() (and finish()).
class Sink {
 public:
  explicit Sink(int fd) : fd_(fd), writer_([this] { run(); }) {}
  Sink(const Sink&) = delete;
  Sink& operator=(const Sink&) = delete;
  ~Sink() { (void)finish(); }

  // Queues the bytes; false once a write has failed.
  bool write(std::string block) {
    MutexLock lock(mutex_);
    changed_.wait(lock, [this]() REQUIRES(mutex_) { return blocks_.size() < kQueuedBlocks || error_ != 0; });
    if (error_ != 0) return false;
    blocks_.push_back(std::move(block));
    changed_.notify_all();
    return true;
  }
  // Waits until every block is written; the errno of the first failure, or 0.
  int finish() {
    {
      MutexLock lock(mutex_);
      closing_ = true;
    }
    changed_.notify_all();
    if (writer_.joinable()) writer_.join();
    MutexLock lock(mutex_);
    return error_;
  }
  int error() {
    MutexLock lock(mutex_);
    return error_;
  }
  // After finish().
  std::uint64_t size() const { return size_; }
  std::string sha256() { return hash_.hex_digest(); }

 private:
  static constexpr std::size_t kQueuedBlocks = 8;
  static constexpr std::uint64_t kWritebackBytes = 8 << 20;

  void run() {
    MutexLock lock(mutex_);
    while (true) {
      changed_.wait(lock, [this]() REQUIRES(mutex_) { return !blocks_.empty() || closing_; });
      if (blocks_.empty()) return;
      std::string block = std::move(blocks_.front());
      blocks_.pop_front();
      changed_.notify_all();
      lock.unlock();
      int failed = write_fully(fd_, block.data(), block.size());
      if (failed == 0) {
        hash_.update(block.data(), block.size());
        size_ += block.size();
        start_writeback();
      }
      lock.lock();
      if (failed != 0) {
        error_ = failed;
        blocks_.clear();
        changed_.notify_all();
        return;
      }
    }
  }

  // Starts writeback of each full kWritebackBytes range and waits for the one
  // before it, so dirty pages stay bounded and the disk works while we compress.
  // Advisory: where sync_file_range does nothing (tmpfs), the fsync does it all.
  void start_writeback() {
    while (size_ - written_back_ >= kWritebackBytes) {
      if (written_back_ >= kWritebackBytes) {
        ::sync_file_range(fd_, static_cast<off_t>(written_back_ - kWritebackBytes), kWritebackBytes,
                          SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER);
      }
      ::sync_file_range(fd_, static_cast<off_t>(written_back_), kWritebackBytes, SYNC_FILE_RANGE_WRITE);
      written_back_ += kWritebackBytes;
    }
  }


  const int fd_;
  Mutex mutex_;
  std::condition_variable_any changed_;
  std::deque<std::string> blocks_ GUARDED_BY(mutex_);
  bool closing_ GUARDED_BY(mutex_) = false;
  int error_ GUARDED_BY(mutex_) = 0;
  // The writer thread's until finish().
  Sha256 hash_;
  std::uint64_t size_ = 0;
  std::uint64_t written_back_ = 0;  // bytes handed to sync_file_range
  std::thread writer_;  // last: starts once the members above exist
};

// The archive's path from libarchive's tar writer to the file: compressed on
// several threads, then hashed and written by the sink.
struct ArchiveOutput {
  Sink& sink;
  ParallelZstd compressor;
};

la_ssize_t compress_write(struct archive* a, void* data, const void* buffer, size_t length) {
  auto* output = static_cast<ArchiveOutput*>(data);
  if (!output->compressor.write(buffer, length)) {
    int err = output->sink.error();
    if (err != 0) archive_set_error(a, err, "%s", std::strerror(err));
    else archive_set_error(a, EIO, "%s", output->compressor.error().c_str());
    return -1;
  }
  return static_cast<la_ssize_t>(length);
}

// One file found under out/ (or a log), in archive order.
struct Item {
  std::string source;  // absolute path on disk
  std::string name;    // path in the archive
  struct stat st {};
};

// Lists root's tree depth first, names sorted, symlinks not followed.
void walk(const std::string& root, const std::string& prefix, std::vector<Item>& items, std::vector<std::string>& missing,
          int depth) {
  DIR* dir = ::opendir(root.c_str());
  if (!dir) {
    missing.push_back(prefix + ": cannot list: " + std::strerror(errno));
    return;
  }
  std::vector<std::string> names;
  while (dirent* entry = ::readdir(dir)) {
    std::string name = entry->d_name;
    if (name != "." && name != "..") names.push_back(std::move(name));
  }
  ::closedir(dir);
  std::sort(names.begin(), names.end());
  for (const auto& name : names) {
    Item item{root + "/" + name, prefix + "/" + name, {}};
    if (::lstat(item.source.c_str(), &item.st) != 0) {
      missing.push_back(item.name + ": cannot stat: " + std::strerror(errno));
      continue;
    }
    if (S_ISDIR(item.st.st_mode)) {
      items.push_back(item);
      if (depth < 512) walk(item.source, item.name, items, missing, depth + 1);
      else missing.push_back(item.name + ": deeper than 512 levels, not archived");
    } else if (S_ISREG(item.st.st_mode) || S_ISLNK(item.st.st_mode)) {
      items.push_back(std::move(item));
    } else {
      missing.push_back(item.name + ": not a regular file, directory or symlink (fifo, socket or device), not archived");
    }
  }
}

int default_threads() {
  unsigned cpus = std::thread::hardware_concurrency();
  return static_cast<int>(std::clamp(cpus, 1u, 8u));
}

// Copies one regular file into the archive; returns false when the archive
// itself failed (its sink's error says why). A file that cannot be read is
// recorded as missing or incomplete instead.
bool add_file(struct archive* a, archive_entry* entry, const Item& item, Manifest& manifest, std::vector<char>& buffer) {
  ManifestEntry record{item.name, "file", 0, "", "", false};
  Fd fd(::open(item.source.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));
  struct stat st = item.st;
  if (!fd.valid() || ::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
    manifest.missing.push_back(item.name + ": cannot open: " + std::strerror(errno ? errno : EINVAL));
    return true;
  }
  ::posix_fadvise(fd.get(), 0, 0, POSIX_FADV_SEQUENTIAL);
  archive_entry_set_filetype(entry, AE_IFREG);
  archive_entry_set_size(entry, st.st_size);
  if (archive_write_header(a, entry) != ARCHIVE_OK) return false;
  Sha256 hash;
  std::uint64_t remaining = static_cast<std::uint64_t>(st.st_size);
  std::uint64_t offset = 0;
  while (remaining > 0) {
    std::size_t want = static_cast<std::size_t>(std::min<std::uint64_t>(remaining, buffer.size()));
    ssize_t n = ::read(fd.get(), buffer.data(), want);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      // Shrunk or unreadable: the header promised st_size bytes, so pad with zeros.
      std::string why = n < 0 ? std::strerror(errno) : "the file shrank while staging";
      manifest.missing.push_back(item.name + ": read stopped at byte " + std::to_string(offset) + " (" + why +
                                 "); the archived copy is padded with zeros");
      record.incomplete = true;
      std::fill(buffer.begin(), buffer.end(), 0);
      n = static_cast<ssize_t>(want);
    }
    if (archive_write_data(a, buffer.data(), static_cast<size_t>(n)) < 0) return false;
    hash.update(buffer.data(), static_cast<std::size_t>(n));
    remaining -= static_cast<std::uint64_t>(n);
    offset += static_cast<std::uint64_t>(n);
  }
  record.size = offset;
  record.sha256 = hash.hex_digest();
  manifest.entries.push_back(std::move(record));
  return true;
}

// One attempt at the whole archive. False (and *error set) when
// the archive could not be written.
bool write_archive(const StageRequest& request, const std::vector<Item>& items, Manifest& manifest, Sink& sink,
                   std::string* error) {
  std::unique_ptr<struct archive, ArchiveFree> a(archive_write_new());
  if (!a) {
    *error = "out of memory for the archive writer";
    return false;
  }
  archive_write_set_format_pax_restricted(a.get());
  // Names as the file system has them, byte for byte: PID 1 runs in the C locale, where libarchive
  // would translate a name to UTF-8 and fail on any byte above 127 ("café.txt"), losing the archive.
  if (archive_write_set_format_option(a.get(), "pax", "hdrcharset", "BINARY") != ARCHIVE_OK) {
    *error = std::string("cannot set the archive's header charset: ") + archive_error_string(a.get());
    return false;
  }
  archive_write_add_filter_none(a.get());
  // Even one worker helps: zstd then compresses on its own thread while this one reads and hashes.
  int threads = request.compression_threads > 0 ? request.compression_threads : default_threads();
  ArchiveOutput output{sink, ParallelZstd(request.compression_level, threads,
                                          [&sink](std::string frame) { return sink.write(std::move(frame)); })};
  // Hand the compressor big blocks, not tar's 10 KiB records.
  archive_write_set_bytes_per_block(a.get(), 1 << 20);
  archive_write_set_bytes_in_last_block(a.get(), 1);
  if (archive_write_open2(a.get(), &output, nullptr, compress_write, nullptr, nullptr) != ARCHIVE_OK) {
    *error = std::string("cannot start the archive: ") + archive_error_string(a.get());
    return false;
  }
  std::vector<char> buffer(kReadBytes);
  for (const Item& item : items) {
    std::unique_ptr<archive_entry, EntryFree> entry(archive_entry_new());
    archive_entry_set_pathname(entry.get(), item.name.c_str());
    archive_entry_set_perm(entry.get(), item.st.st_mode & 0777);  // never setuid/setgid/sticky
    archive_entry_set_mtime(entry.get(), item.st.st_mtim.tv_sec, item.st.st_mtim.tv_nsec);
    bool written = true;
    if (S_ISDIR(item.st.st_mode)) {
      archive_entry_set_filetype(entry.get(), AE_IFDIR);
      written = archive_write_header(a.get(), entry.get()) == ARCHIVE_OK;
      if (written) manifest.entries.push_back({item.name, "dir", 0, "", "", false});
    } else if (S_ISLNK(item.st.st_mode)) {
      char target[4096];
      ssize_t n = ::readlink(item.source.c_str(), target, sizeof target - 1);
      if (n < 0) {
        manifest.missing.push_back(item.name + ": cannot read the symlink: " + std::strerror(errno));
        continue;
      }
      target[n] = '\0';
      archive_entry_set_filetype(entry.get(), AE_IFLNK);
      archive_entry_set_symlink(entry.get(), target);
      written = archive_write_header(a.get(), entry.get()) == ARCHIVE_OK;
      if (written) manifest.entries.push_back({item.name, "symlink", 0, "", target, false});
    } else {
      written = add_file(a.get(), entry.get(), item, manifest, buffer);
    }
    if (!written) {
      *error = std::string("archive write failed at ") + item.name + ": " + archive_error_string(a.get());
      return false;
    }
  }
  if (archive_write_close(a.get()) != ARCHIVE_OK) {
    *error = std::string("archive write failed at the end: ") + archive_error_string(a.get());
    return false;
  }
  if (!output.compressor.finish()) {
    int err = sink.error();
    *error = "archive write failed at the end: " + (err != 0 ? std::string(std::strerror(err)) : output.compressor.error());
    return false;
  }
  return true;
}

bool attempt(const StageRequest& request, const std::vector<Item>& items, Manifest& manifest, StagingSummary& summary) {
  std::string temp = request.archive_path + ".partial";
  Fd fd(::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  if (!fd.valid()) {
    summary.disk_full = errno == ENOSPC;
    summary.error = "cannot create " + temp + ": " + std::strerror(errno);
    return false;
  }
  Sink sink(fd.get());
  std::string error;
  bool ok = write_archive(request, items, manifest, sink, &error);
  int failed = sink.finish();
  if (ok && failed != 0) {
    error = std::string("cannot write the archive: ") + std::strerror(failed);
    ok = false;
  }
  if (ok && ::fsync(fd.get()) != 0) {
    failed = errno;
    error = std::string("cannot fsync the archive: ") + std::strerror(errno);
    ok = false;
  }
  if (ok && ::rename(temp.c_str(), request.archive_path.c_str()) != 0) {
    failed = errno;
    error = std::string("cannot rename the archive into place: ") + std::strerror(errno);
    ok = false;
  }
  if (!ok) {
    ::unlink(temp.c_str());
    summary.disk_full = failed == ENOSPC || failed == EDQUOT;
    summary.error = error;
    return false;
  }
  manifest.archive_size = sink.size();
  manifest.archive_sha256 = sink.sha256();
  return true;
}

}  // namespace

StageOutcome stage_outputs(const StageRequest& request) {
  StageOutcome outcome;
  std::vector<Item> items;
  std::vector<std::string> walk_missing;
  struct stat st;
  if (::lstat(request.out_dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    items.push_back({request.out_dir, "out", st});
    walk(request.out_dir, "out", items, walk_missing, 0);
  } else if (::lstat(request.out_dir.c_str(), &st) == 0) {
    walk_missing.push_back("out: not a directory, not archived");
  }
  for (const auto& [path, name] : {std::pair{request.stdout_log, "stdout.log"}, std::pair{request.stderr_log, "stderr.log"}}) {
    Item log{path, name, {}};
    if (::lstat(path.c_str(), &log.st) == 0 && S_ISREG(log.st.st_mode)) items.push_back(log);
  }
  for (const Item& item : items) {
    if (S_ISREG(item.st.st_mode) && item.name.rfind("out/", 0) == 0) {
      outcome.summary.output_files.push_back(item.name.substr(4));
    }
  }

  Manifest manifest;
  manifest.missing = walk_missing;
  if (attempt(request, items, manifest, outcome.summary)) {
    outcome.summary.archive_written = true;
  } else if (outcome.summary.disk_full) {
    // Not enough room for everything: keep the logs, name the rest.
    std::string first_error = outcome.summary.error;
    std::vector<Item> logs;
    Manifest fallback;
    fallback.missing = walk_missing;
    for (const Item& item : items) {
      if (item.name.rfind("out", 0) == 0) {
        if (!S_ISDIR(item.st.st_mode)) {
          fallback.missing.push_back(item.name + ": not archived, the staging disk is full (" + first_error +
                                     "); the file is still at " + item.source);
        }
      } else {
        logs.push_back(item);
      }
    }
    StagingSummary retry;
    if (attempt(request, logs, fallback, retry)) {
      outcome.summary.archive_written = true;
      outcome.summary.error.clear();
    } else {
      for (const Item& item : logs) fallback.missing.push_back(item.name + ": not archived: " + retry.error);
      outcome.summary.error = first_error + "; retrying with the logs alone failed too: " + retry.error;
    }
    manifest = std::move(fallback);
  } else {
    for (const Item& item : items) {
      if (!S_ISDIR(item.st.st_mode)) manifest.missing.push_back(item.name + ": not archived: " + outcome.summary.error);
    }
  }
  outcome.summary.missing = manifest.missing;
  outcome.manifest = std::move(manifest);
  return outcome;
}

}  // namespace gpubox::jobs
