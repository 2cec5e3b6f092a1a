#include "model/weights/safetensors_writer.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <nlohmann/json.hpp>
#include <set>
#include <unistd.h>

namespace gpubox::weights {
namespace {

Status io_error(const std::string& what, const std::string& path) {
  return {ErrorCode::internal, what + " " + path + ": " + std::strerror(errno)};
}

Status write_all(int fd, const void* data, std::size_t size, const std::string& path) {
  const auto* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = ::write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return io_error("cannot write", path);
    p += n;
    size -= static_cast<std::size_t>(n);
  }
  return {};
}

}  // namespace

Status write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                         const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::set<std::string> names;
  std::size_t offset = 0;
  for (const auto& t : tensors) {
    if (t.name.empty() || t.name == "__metadata__" || !names.insert(t.name).second) {
      return {ErrorCode::invalid_request, "safetensors: tensor name '" + t.name + "' is empty, reserved or given twice"};
    }
    std::size_t elements = 1;
    for (auto d : t.shape) elements *= static_cast<std::size_t>(d);
    if (elements * dtype_size(t.dtype) != t.bytes) {
      return {ErrorCode::invalid_request, "safetensors: tensor '" + t.name + "' has " + std::to_string(t.bytes) +
                                              " bytes, not what its shape and dtype need"};
    }
    header[t.name] = {{"dtype", std::string(dtype_name(t.dtype))}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.bytes}}};
    offset += t.bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::uint64_t length = text.size();
  unsigned char prefix[8];
  for (int i = 0; i < 8; ++i) prefix[i] = static_cast<unsigned char>(length >> (8 * i));

  std::string temporary = path + ".partial";
  int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return io_error("cannot create", temporary);
  Status written = write_all(fd, prefix, sizeof prefix, temporary);
  if (written) written = write_all(fd, text.data(), text.size(), temporary);
  for (const auto& t : tensors) {
    if (written) written = write_all(fd, t.data, t.bytes, temporary);
  }
  if (::close(fd) != 0 && written) written = io_error("cannot write", temporary);
  if (written && std::rename(temporary.c_str(), path.c_str()) != 0) written = io_error("cannot rename into", path);
  if (!written) ::unlink(temporary.c_str());
  return written;
}

}  // namespace gpubox::weights
