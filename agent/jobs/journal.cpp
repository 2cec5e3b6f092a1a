#include "agent/jobs/journal.h"
#include "base/thread_annotations.h"

#include <fcntl.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstring>
#include <ctime>
#include <fstream>

namespace gpubox::jobs {
namespace {

std::string utc_now() {
  struct timespec now;
  ::clock_gettime(CLOCK_REALTIME, &now);
  struct tm parts;
  ::gmtime_r(&now.tv_sec, &parts);
  char text[64];
  std::size_t n = std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%S", &parts);
  std::snprintf(text + n, sizeof text - n, ".%06ldZ", now.tv_nsec / 1000);
  return text;
}

}  // namespace

Result<std::unique_ptr<Journal>> Journal::open(const std::string& path) {
  Fd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600));
  if (!fd.valid()) return Status::from_errno(errno, "cannot open the journal " + path);
  return std::unique_ptr<Journal>(new Journal(path, std::move(fd)));
}

Status Journal::sync() {
  MutexLock lock(mutex_);
  if (::fdatasync(fd_.get()) != 0) return Status::from_errno(errno, "cannot fsync the journal " + path_);
  return Status::ok();
}

Status Journal::append(nlohmann::json event, bool sync) {
  event["ts"] = utc_now();
  std::string line = event.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  MutexLock lock(mutex_);
  std::size_t done = 0;
  while (done < line.size()) {
    ssize_t n = ::write(fd_.get(), line.data() + done, line.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::from_errno(errno, "cannot append to the journal " + path_);
    done += static_cast<std::size_t>(n);
  }
  if (!sync) return Status::ok();
  if (::fdatasync(fd_.get()) != 0) return Status::from_errno(errno, "cannot fsync the journal " + path_);
  return Status::ok();
}

std::vector<nlohmann::json> read_journal(const std::string& path, int* skipped) {
  std::vector<nlohmann::json> events;
  int bad = 0;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    auto event = nlohmann::json::parse(line, nullptr, false);
    if (event.is_discarded() || !event.is_object()) {
      ++bad;
      continue;
    }
    events.push_back(std::move(event));
  }
  if (skipped) *skipped = bad;
  return events;
}

}  // namespace gpubox::jobs
