// AuthorizedKeys: the allow-list of client public keys (Z85). Keys come from
// a fixed list and, optionally, a file (one key per line, '#' comments) that
// is re-read whenever its modification time changes, so a key removed from
// the file is refused from the next message on. Any thread.
#pragma once

#include <chrono>
#include <set>
#include <string>
#include <vector>

#include "base/thread_annotations.h"

namespace gpubox::rpc {

class AuthorizedKeys {
 public:
  AuthorizedKeys(std::vector<std::string> keys, std::string file = {});

  bool allows(const std::string& public_key) EXCLUDES(mutex_);
  void set_keys(std::vector<std::string> keys) EXCLUDES(mutex_);

 private:
  void refresh_from_file() REQUIRES(mutex_);

  Mutex mutex_;
  std::set<std::string> fixed_ GUARDED_BY(mutex_);
  std::set<std::string> from_file_ GUARDED_BY(mutex_);
  std::string file_ GUARDED_BY(mutex_);
  std::chrono::steady_clock::time_point last_check_ GUARDED_BY(mutex_){};
  std::int64_t file_mtime_ns_ GUARDED_BY(mutex_) = -1;
};

}  // namespace gpubox::rpc
