#include "host/budget/journal.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <set>
#include <type_traits>

#include "host/budget/amounts.h"

namespace gpubox::host::budget {
namespace {

const std::set<std::string>& known_ops() {
  static const std::set<std::string> ops = {"define", "default", "reserve", "confirm", "failed", "settle", "release", "torn"};
  return ops;
}


// F_OFD_SETLKW on the whole file: per open file description, so threads of one process exclude each other too.
Status lock_file(int fd, short type) {
  struct flock lock {};
  lock.l_type = type;
  lock.l_whence = SEEK_SET;
  lock.l_start = 0;
  lock.l_len = 0;
  while (::fcntl(fd, F_OFD_SETLKW, &lock) != 0) {
    if (errno != EINTR) return Status::from_errno(errno, "cannot lock the budget journal");
  }
  return Status::ok();
}

Result<std::string> read_all(int fd, const std::string& path) {
  std::string text;
  char buffer[65536];
  off_t offset = 0;
  while (true) {
    ssize_t n = ::pread(fd, buffer, sizeof buffer, offset);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::from_errno(errno, "cannot read '" + path + "'");
    if (n == 0) break;
    text.append(buffer, static_cast<size_t>(n));
    offset += n;
  }
  return text;
}

Status write_all(int fd, const std::string& text, const std::string& path) {
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Status::from_errno(errno, "cannot write '" + path + "'");
    done += static_cast<size_t>(n);
  }
  return Status::ok();
}

template <typename T>
bool take(const nlohmann::json& json, const char* key, T* into) {
  auto it = json.find(key);
  if (it == json.end()) return true;
  // An integer field takes integers only: a float (or an integer too large for
  // JSON's integer types, which the parser keeps as a float) is refused, never cast.
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    if (!it->is_number_integer()) return false;
  }
  try {
    *into = it->get<T>();
    return true;
  } catch (const nlohmann::json::exception&) {
    return false;
  }
}

}  // namespace

double now_seconds() {
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

nlohmann::json JournalEntry::to_json() const {
  nlohmann::json json = {{"op", op}, {"t", time}};
  if (op == "define") {
    json["budget"] = budget;
    json["max_micro_usd"] = max_micro_usd;
    json["max_micro_gpu_h"] = max_micro_gpu_h;
    json["prices"] = prices;
    json["default"] = make_default;
  } else if (op == "default") {
    json["budget"] = budget;
  } else if (op == "reserve") {
    json.update({{"budget", budget},         {"reservation", reservation}, {"micro_usd", micro_usd},
                 {"micro_gpu_h", micro_gpu_h}, {"kind", kind},             {"backend", backend},
                 {"sandbox", sandbox},       {"name", name},               {"app", app},
                 {"usd_per_hour", usd_per_hour}, {"gpu_count", gpu_count}, {"seconds", seconds},
                 {"create_usd", create_usd}});
  } else if (op == "confirm") {
    json.update({{"reservation", reservation}, {"sandbox", sandbox}, {"remote_id", remote_id}});
  } else if (op == "settle") {
    json.update({{"reservation", reservation}, {"micro_usd", micro_usd}, {"micro_gpu_h", micro_gpu_h}, {"text", text}});
  } else if (op == "failed" || op == "release") {
    json.update({{"reservation", reservation}, {"text", text}});
  } else if (op == "torn") {
    json.update({{"line", line}, {"text", text}});
  }
  return json;
}

Result<JournalEntry> parse_journal_line(const std::string& line) {
  auto bad = [](const std::string& why) { return Status(ErrorCode::invalid_request, why); };
  auto json = nlohmann::json::parse(line, nullptr, false);
  if (json.is_discarded() || !json.is_object()) return bad("not a JSON object");
  JournalEntry entry;
  if (!json.contains("op") || !json["op"].is_string()) return bad("no op");
  entry.op = json["op"].get<std::string>();
  if (!known_ops().count(entry.op)) return bad("unknown op '" + entry.op + "'");
  bool ok = take(json, "t", &entry.time) && take(json, "budget", &entry.budget) &&
            take(json, "max_micro_usd", &entry.max_micro_usd) && take(json, "max_micro_gpu_h", &entry.max_micro_gpu_h) &&
            take(json, "default", &entry.make_default) && take(json, "reservation", &entry.reservation) &&
            take(json, "micro_usd", &entry.micro_usd) && take(json, "micro_gpu_h", &entry.micro_gpu_h) &&
            take(json, "kind", &entry.kind) && take(json, "backend", &entry.backend) && take(json, "sandbox", &entry.sandbox) &&
            take(json, "name", &entry.name) && take(json, "app", &entry.app) && take(json, "usd_per_hour", &entry.usd_per_hour) &&
            take(json, "gpu_count", &entry.gpu_count) && take(json, "seconds", &entry.seconds) &&
            take(json, "create_usd", &entry.create_usd) && take(json, "remote_id", &entry.remote_id) &&
            take(json, "text", &entry.text) && take(json, "line", &entry.line);
  if (!ok) return bad("a field of the wrong type");
  if (json.contains("prices")) entry.prices = json["prices"];
  for (double value : {entry.time, entry.usd_per_hour, entry.gpu_count, entry.seconds, entry.create_usd}) {
    if (!std::isfinite(value) || value < 0) return bad("a negative or non-finite number");
  }
  if (entry.micro_usd < 0 || entry.micro_gpu_h < 0) return bad("a negative amount");
  for (std::int64_t amount : {entry.micro_usd, entry.micro_gpu_h, entry.max_micro_usd, entry.max_micro_gpu_h}) {
    if (amount > kMaxMicro) return bad("an amount beyond " + std::to_string(kMaxMicro) + " millionths ($1e12)");
  }
  bool needs_budget = entry.op == "define" || entry.op == "default" || entry.op == "reserve";
  if (needs_budget && entry.budget.empty()) return bad(entry.op + " without a budget");
  bool needs_reservation = entry.op != "define" && entry.op != "default" && entry.op != "torn";
  if (needs_reservation && entry.reservation.empty()) return bad(entry.op + " without a reservation");
  return entry;
}

JournalContents parse_journal(const std::string& text, bool allow_partial_tail, std::size_t* consumed) {
  JournalContents contents;
  std::size_t at = 0;
  while (at < text.size()) {
    std::size_t end = text.find('\n', at);
    if (end == std::string::npos) {
      if (allow_partial_tail) break;
      ++contents.lines;
      contents.problems.push_back({contents.lines, "torn: the last line has no end (" + std::to_string(text.size() - at) +
                                                       " bytes); a writer stopped mid-line, before its operation was dispatched"});
      at = text.size();
      break;
    }
    ++contents.lines;
    std::string line = text.substr(at, end - at);
    at = end + 1;
    auto entry = parse_journal_line(line);
    if (!entry) {
      contents.problems.push_back({contents.lines, "unreadable: " + entry.status().message()});
      continue;
    }
    if (entry->op == "torn") {
      // A sealed torn line: say so in place of "unreadable".
      for (auto& problem : contents.problems) {
        if (problem.line == entry->line) problem.what = "torn (sealed at line " + std::to_string(contents.lines) + "): " + entry->text;
      }
    }
    contents.entries.push_back(std::move(*entry));
  }
  if (consumed) *consumed = at;
  return contents;
}

Journal::Journal(std::string store_root) : dir_(store_root + "/budget"), path_(dir_ + "/journal.jsonl") {}

Journal::~Journal() { unlock(); }

void Journal::unlock() {
  if (fd_ >= 0) ::close(fd_);  // closing the description drops its OFD lock
  fd_ = -1;
}

Status Journal::open_for_writing() {
  // The store itself may not exist yet (a budget made before any sandbox): its directories are private.
  std::error_code error;
  std::filesystem::create_directories(dir_, error);
  if (error) return Status(ErrorCode::permission_denied, "cannot create '" + dir_ + "': " + error.message());
  ::chmod(dir_.c_str(), 0700);
  bool existed = ::access(path_.c_str(), F_OK) == 0;
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd_ < 0) return Status::from_errno(errno, "cannot open '" + path_ + "'");
  if (!existed) {  // the new file's name must survive a crash too
    int dir = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir >= 0) {
      ::fsync(dir);
      ::close(dir);
    }
  }
  return Status::ok();
}

Result<JournalContents> Journal::lock_and_read() {
  unlock();
  if (Status opened = open_for_writing(); !opened) return opened;
  if (Status locked = lock_file(fd_, F_WRLCK); !locked) {
    unlock();
    return locked;
  }
  auto text = read_all(fd_, path_);
  if (!text) {
    unlock();
    return text.status();
  }
  JournalContents contents = parse_journal(*text);
  lines_ = contents.lines;
  if (!text->empty() && text->back() != '\n') {
    // Seal the torn line: it stays in the file, with a line after it saying what it was.
    JournalEntry torn;
    torn.op = "torn";
    torn.time = now_seconds();
    torn.line = contents.lines;
    std::size_t start = text->rfind('\n');
    std::string tail = text->substr(start == std::string::npos ? 0 : start + 1);
    torn.text = tail.substr(0, 200);
    std::string seal = "\n" + torn.to_json().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    Status sealed = write_all(fd_, seal, path_);
    if (sealed && ::fdatasync(fd_) != 0) sealed = Status::from_errno(errno, "cannot sync '" + path_ + "'");
    if (!sealed) {
      unlock();
      return sealed;
    }
    contents.entries.push_back(torn);
    ++lines_;
  }
  return contents;
}

Status Journal::append(const std::vector<JournalEntry>& entries) {
  if (fd_ < 0) return Status(ErrorCode::internal, "the budget journal is not locked");
  std::string text;
  for (auto entry : entries) {
    if (entry.time == 0) entry.time = now_seconds();
    text += entry.to_json().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  }
  if (Status written = write_all(fd_, text, path_); !written) return written;
  // The line is on disk before the caller dispatches what it reserved.
  if (::fdatasync(fd_) != 0) return Status::from_errno(errno, "cannot sync '" + path_ + "'");
  lines_ += static_cast<std::int64_t>(entries.size());
  return Status::ok();
}

Result<JournalContents> Journal::read() const {
  int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0 && errno == ENOENT) return JournalContents{};
  if (fd < 0) return Status::from_errno(errno, "cannot open '" + path_ + "'");
  Status locked = lock_file(fd, F_RDLCK);
  auto text = locked ? read_all(fd, path_) : Result<std::string>(locked);
  ::close(fd);
  if (!text) return text.status();
  return parse_journal(*text);
}

}  // namespace gpubox::host::budget
