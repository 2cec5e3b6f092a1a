#include "host/mcp/tensor_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <map>
#include <nlohmann/json.hpp>

namespace gpubox::mcp {
namespace {

const std::map<std::string, std::string>& safetensors_dtypes() {
  static const std::map<std::string, std::string> kDtypes = {
      {"float32", "F32"}, {"float16", "F16"}, {"bfloat16", "BF16"}, {"float64", "F64"},
      {"int64", "I64"},   {"int32", "I32"},   {"uint8", "U8"},      {"bool", "BOOL"}};
  return kDtypes;
}

bool write_all(int fd, const std::string& data) {
  std::size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<std::size_t>(n);
  }
  return true;
}

}  // namespace

Status check_new_file(const std::string& path) {
  if (path.empty() || path[0] != '/') return Status::invalid_request("save_to: expected an absolute path, got '" + path + "'");
  std::string dir = path.substr(0, path.find_last_of('/'));
  struct stat st {};
  if (::stat(dir.empty() ? "/" : dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return Status::invalid_request("save_to: the directory '" + (dir.empty() ? "/" : dir) + "' does not exist");
  }
  if (::lstat(path.c_str(), &st) == 0) return Status::invalid_request("save_to: '" + path + "' exists already (name a new file)");
  return Status::ok();
}

Status write_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors) {
  nlohmann::json header = nlohmann::json::object();
  std::size_t offset = 0;
  for (const auto& tensor : tensors) {
    auto dtype = safetensors_dtypes().find(tensor.dtype);
    if (dtype == safetensors_dtypes().end()) {
      return Status::invalid_request("save_to: " + tensor.name + " has dtype " + tensor.dtype + ", which the file cannot hold");
    }
    header[tensor.name] = {{"dtype", dtype->second}, {"shape", tensor.shape}, {"data_offsets", {offset, offset + tensor.bytes.size()}}};
    offset += tensor.bytes.size();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  std::string prefix(8, '\0');
  for (int i = 0; i < 8; ++i) prefix[static_cast<std::size_t>(i)] = static_cast<char>((text.size() >> (8 * i)) & 0xff);
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return Status::from_errno(errno, "save_to: cannot create '" + path + "'");
  bool ok = write_all(fd, prefix) && write_all(fd, text);
  for (const auto& tensor : tensors) ok = ok && write_all(fd, tensor.bytes);
  int saved_errno = errno;
  ok = ::close(fd) == 0 && ok;
  if (!ok) {
    ::unlink(path.c_str());
    return Status::from_errno(saved_errno, "save_to: cannot write '" + path + "'");
  }
  return Status::ok();
}

}  // namespace gpubox::mcp
