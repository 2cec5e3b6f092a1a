#include "rpc/authorized_keys.h"

#include <sys/stat.h>

#include <fstream>

#include "base/thread_annotations.h"
#include "rpc/keys.h"

namespace gpubox::rpc {

AuthorizedKeys::AuthorizedKeys(std::vector<std::string> keys, std::string file)
    : fixed_(keys.begin(), keys.end()), file_(std::move(file)) {}

void AuthorizedKeys::set_keys(std::vector<std::string> keys) {
  MutexLock lock(mutex_);
  fixed_ = std::set<std::string>(keys.begin(), keys.end());
}

bool AuthorizedKeys::allows(const std::string& public_key) {
  MutexLock lock(mutex_);
  refresh_from_file();
  return fixed_.count(public_key) || from_file_.count(public_key);
}

void AuthorizedKeys::refresh_from_file() {
  if (file_.empty()) return;
  // A stat per message would be cheap, but a burst of 100k calls/s needs none:
  // a change is seen within 20 ms.
  auto now = std::chrono::steady_clock::now();
  if (now - last_check_ < std::chrono::milliseconds(20)) return;
  last_check_ = now;
  struct stat info {};
  if (::stat(file_.c_str(), &info) != 0) {
    from_file_.clear();  // a missing file authorizes nobody
    file_mtime_ns_ = -1;
    return;
  }
  std::int64_t mtime = static_cast<std::int64_t>(info.st_mtim.tv_sec) * 1'000'000'000 + info.st_mtim.tv_nsec;
  if (mtime == file_mtime_ns_) return;
  file_mtime_ns_ = mtime;
  from_file_.clear();
  std::ifstream in(file_);
  std::string line;
  while (std::getline(in, line)) {
    auto first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos || line[first] == '#') continue;
    auto last = line.find_last_not_of(" \t\r");
    std::string key = line.substr(first, last - first + 1);
    if (is_z85_key(key)) from_file_.insert(key);
  }
}

}  // namespace gpubox::rpc
