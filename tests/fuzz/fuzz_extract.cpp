// Fuzzes the host's hardened extractor (base/safe_extractor.h) with
// whole archives: whatever the bytes, it must either extract or refuse with a
// clear error, never write outside its destination, and leave no destination
// behind when it refuses. Each input extracts into a fresh directory of a
// private scratch dir, whose other contents are checked to stay untouched.
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "base/safe_extractor.h"

using namespace gpubox;

namespace {

void check(bool holds) {
  if (!holds) std::abort();
}

// The scratch dir: "dest" is extracted into, "canary" must never change.
// Removed when the process exits.
struct Scratch {
  Scratch() {
    char pattern[] = "/tmp/gpubox-fuzz-extract-XXXXXX";
    check(::mkdtemp(pattern) != nullptr);
    dir = pattern;
    check(::mkdir((dir + "/canary").c_str(), 0755) == 0);
  }
  ~Scratch() {
    std::error_code error;
    std::filesystem::remove_all(dir, error);
  }
  std::string dir;
};

const std::string& scratch() {
  static const Scratch made;
  return made.dir;
}

int entries_in(const std::string& dir) {
  int count = 0;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return -1;
  while (dirent* e = ::readdir(d)) count += std::string(e->d_name) != "." && std::string(e->d_name) != "..";
  ::closedir(d);
  return count;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > 256 * 1024) return -1;
  std::string dest = scratch() + "/dest";
  harvest::ExtractLimits limits;
  limits.max_total_bytes = 8 << 20;
  limits.max_entries = 2000;
  auto result = harvest::extract_archive_memory(data, size, dest, limits);
  struct stat st;
  if (!result) {
    check(!result.status().message().empty());
    check(::lstat(dest.c_str(), &st) != 0);  // a refusal leaves no destination
  } else {
    check(result->bytes <= limits.max_total_bytes);
  }
  // Nothing appeared beside the destination, nothing inside the canary.
  check(entries_in(scratch()) == (result ? 2 : 1));
  check(entries_in(scratch() + "/canary") == 0);
  std::error_code error;
  std::filesystem::remove_all(dest, error);
  return 0;
}
