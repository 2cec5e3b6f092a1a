#include "model/weights/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

namespace gpubox::weights {

Result<std::unique_ptr<MappedFile>> MappedFile::open(const std::string& path) {
  // O_NONBLOCK: a FIFO named as a weights file must not block the open.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) return Status::from_errno(errno, "cannot open '" + path + "'");
  struct stat info {};
  if (::fstat(fd, &info) != 0) {
    int err = errno;
    ::close(fd);
    return Status::from_errno(err, "cannot stat '" + path + "'");
  }
  if (!S_ISREG(info.st_mode)) {
    ::close(fd);
    return Status(ErrorCode::invalid_request, path + ": not a regular file");
  }
  auto size = static_cast<std::size_t>(info.st_size);
  const std::byte* data = nullptr;
  if (size > 0) {  // mmap refuses a length of 0
    void* mapped = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (mapped == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      return Status::from_errno(err, "cannot map '" + path + "'");
    }
    data = static_cast<const std::byte*>(mapped);
  }
  return std::unique_ptr<MappedFile>(new MappedFile(path, fd, data, size));
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<std::byte*>(data_), size_);  // NOLINT: munmap takes void*
  ::close(fd_);
}

Status MappedFile::still_intact() const {
  struct stat info {};
  if (::fstat(fd_, &info) != 0) return Status::from_errno(errno, "cannot stat '" + path_ + "'");
  if (static_cast<std::size_t>(info.st_size) != size_) {
    return Status(ErrorCode::input_changed, path_ + ": the file changed size since it was opened (" +
                                                std::to_string(size_) + " -> " + std::to_string(info.st_size) +
                                                " bytes)");
  }
  return Status::ok();
}

}  // namespace gpubox::weights
