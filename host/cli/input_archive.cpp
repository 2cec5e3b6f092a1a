#include "host/cli/input_archive.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <vector>

#include "base/fd.h"

namespace gpubox::host::cli {
namespace {

namespace fs = std::filesystem;

struct ArchiveFree {
  void operator()(struct archive* a) const { archive_write_free(a); }
};
struct EntryFree {
  void operator()(archive_entry* e) const { archive_entry_free(e); }
};

// Writes one regular file's header and bytes; false with *why when it failed.
bool add_file(struct archive* a, archive_entry* entry, const std::string& source, std::string* why) {
  Fd fd(::open(source.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  struct stat st {};
  if (!fd.valid() || ::fstat(fd.get(), &st) != 0) {
    *why = "cannot read '" + source + "': " + std::strerror(errno);
    return false;
  }
  archive_entry_set_filetype(entry, AE_IFREG);
  archive_entry_set_size(entry, st.st_size);
  if (archive_write_header(a, entry) != ARCHIVE_OK) return false;
  std::vector<char> buffer(1 << 20);
  for (off_t left = st.st_size; left > 0;) {
    ssize_t n = ::read(fd.get(), buffer.data(), static_cast<std::size_t>(std::min<off_t>(left, static_cast<off_t>(buffer.size()))));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      *why = "'" + source + "' changed while it was packed";
      return false;
    }
    if (archive_write_data(a, buffer.data(), static_cast<std::size_t>(n)) < 0) return false;
    left -= n;
  }
  return true;
}

}  // namespace

Result<std::unique_ptr<InputArchive>> InputArchive::pack(const std::string& dir) {
  const char* tmp = std::getenv("TMPDIR");
  std::string path = std::string(tmp && *tmp ? tmp : "/tmp") + "/gpubox-input-XXXXXX";
  int fd = ::mkstemp(path.data());
  if (fd < 0) return Status::from_errno(errno, "cannot create a temp file for --input '" + dir + "'");
  ::close(fd);
  std::unique_ptr<InputArchive> packed(new InputArchive(path));  // removes the file on every return below

  std::unique_ptr<struct archive, ArchiveFree> a(archive_write_new());
  if (!a) return Status(ErrorCode::resource_exhausted, "out of memory for the archive writer");
  archive_write_set_format_pax_restricted(a.get());
  archive_write_add_filter_none(a.get());
  if (archive_write_open_filename(a.get(), path.c_str()) != ARCHIVE_OK) {
    return Status(ErrorCode::internal, std::string("cannot write '") + path + "': " + archive_error_string(a.get()));
  }
  std::error_code error;
  fs::path root(dir);
  for (auto it = fs::recursive_directory_iterator(root, error); !error && it != fs::end(it); it.increment(error)) {
    std::string name = it->path().lexically_relative(root).string();  // never through a symlink
    struct stat st {};
    if (error || ::lstat(it->path().c_str(), &st) != 0) break;
    std::unique_ptr<archive_entry, EntryFree> entry(archive_entry_new());
    archive_entry_set_pathname(entry.get(), name.c_str());
    archive_entry_set_perm(entry.get(), st.st_mode & 0777);  // never setuid/setgid/sticky
    archive_entry_set_mtime(entry.get(), st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
    std::string why;
    bool written = true;
    if (S_ISDIR(st.st_mode)) {
      archive_entry_set_filetype(entry.get(), AE_IFDIR);
      written = archive_write_header(a.get(), entry.get()) == ARCHIVE_OK;
    } else if (S_ISLNK(st.st_mode)) {
      std::string target = fs::read_symlink(it->path(), error).string();
      if (error) break;
      archive_entry_set_filetype(entry.get(), AE_IFLNK);
      archive_entry_set_symlink(entry.get(), target.c_str());
      written = archive_write_header(a.get(), entry.get()) == ARCHIVE_OK;
    } else if (S_ISREG(st.st_mode)) {
      written = add_file(a.get(), entry.get(), it->path().string(), &why);
    } else {
      std::fprintf(stderr, "gpubox submit: skipped '%s' in --input '%s': not a file, directory or symlink\n",
                   name.c_str(), dir.c_str());
    }
    if (!written) {
      return Status(ErrorCode::invalid_request,
                    "--input '" + dir + "': " + (why.empty() ? std::string(archive_error_string(a.get())) : why));
    }
  }
  if (error) return Status(ErrorCode::invalid_request, "--input '" + dir + "': cannot read it: " + error.message());
  if (archive_write_close(a.get()) != ARCHIVE_OK) {
    return Status(ErrorCode::internal, std::string("cannot write '") + path + "': " + archive_error_string(a.get()));
  }
  return packed;
}

InputArchive::~InputArchive() { ::unlink(path_.c_str()); }

}  // namespace gpubox::host::cli
