#include "host/process_identity.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

namespace gpubox::host {
namespace {

struct StatFields {
  char state = '?';
  std::uint64_t start_time = 0;
};

std::optional<StatFields> read_stat(pid_t pid) {
  if (pid <= 0) return std::nullopt;
  std::string path = "/proc/" + std::to_string(pid) + "/stat";
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  char buffer[1024];
  ssize_t n = ::read(fd, buffer, sizeof buffer - 1);
  ::close(fd);
  if (n <= 0) return std::nullopt;
  std::string text(buffer, static_cast<size_t>(n));
  // comm (field 2) may hold spaces and parentheses: fields resume after the last ')'.
  size_t close = text.rfind(')');
  if (close == std::string::npos || close + 2 >= text.size()) return std::nullopt;
  StatFields fields;
  fields.state = text[close + 2];
  // Field 3 is the state; the start time is field 22, 19 fields further.
  size_t at = close + 2;
  for (int field = 3; field < 22; ++field) {
    at = text.find(' ', at);
    if (at == std::string::npos) return std::nullopt;
    ++at;
  }
  fields.start_time = std::strtoull(text.c_str() + at, nullptr, 10);
  return fields;
}

}  // namespace

std::optional<std::uint64_t> process_start_time(pid_t pid) {
  auto fields = read_stat(pid);
  if (!fields) return std::nullopt;
  return fields->start_time;
}

bool process_alive(const ProcessIdentity& process) {
  auto fields = read_stat(process.pid);
  return fields && fields->start_time == process.start_time && fields->state != 'Z' && fields->state != 'X';
}

}  // namespace gpubox::host
