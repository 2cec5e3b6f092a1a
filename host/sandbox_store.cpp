#include "host/sandbox_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>


namespace gpubox::host {
namespace {

Status make_dir(const std::string& path, mode_t mode) {
  if (::mkdir(path.c_str(), mode) != 0 && errno != EEXIST) return Status::from_errno(errno, "cannot create '" + path + "'");
  return Status::ok();
}

std::string random_id() {
  unsigned char bytes[6];
  if (::getrandom(bytes, sizeof bytes, 0) != static_cast<ssize_t>(sizeof bytes)) {
    // getrandom does not fail for 6 bytes once the pool is ready; fall back on the clock.
    auto now = static_cast<unsigned long long>(::time(nullptr)) ^ static_cast<unsigned long long>(::getpid());
    for (auto& byte : bytes) byte = static_cast<unsigned char>(now >>= 8);
  }
  static const char kHex[] = "0123456789abcdef";
  std::string id;
  for (unsigned char byte : bytes) {
    id += kHex[byte >> 4];
    id += kHex[byte & 15];
  }
  return id;
}

// An exclusive flock on STORE/lock for as long as it lives.
class StoreLock {
 public:
  explicit StoreLock(const std::string& root) : fd_(::open((root + "/lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600)) {
    if (fd_ >= 0) ::flock(fd_, LOCK_EX);
  }
  ~StoreLock() {
    if (fd_ >= 0) ::close(fd_);
  }
  StoreLock(const StoreLock&) = delete;
  StoreLock& operator=(const StoreLock&) = delete;
  bool held() const { return fd_ >= 0; }

 private:
  int fd_;
};

double now_seconds() {
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

}  // namespace

bool valid_sandbox_name(const std::string& name) {
  if (name.empty() || name.size() > 63 || !std::isalnum(static_cast<unsigned char>(name[0]))) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-';
  });
}

nlohmann::json SandboxRecord::to_json() const {
  return {{"id", id},         {"name", name},           {"backend", backend},
          {"dir", dir},       {"endpoint", endpoint},   {"agent_pid", agent.pid},
          {"agent_start_time", agent.start_time},       {"created_at", created_at},
          {"spec", spec}};
}

Result<SandboxRecord> SandboxRecord::from_json(const nlohmann::json& json) {
  try {
    SandboxRecord record;
    record.id = json.at("id").get<std::string>();
    record.name = json.at("name").get<std::string>();
    record.backend = json.at("backend").get<std::string>();
    record.dir = json.at("dir").get<std::string>();
    record.endpoint = json.at("endpoint").get<std::string>();
    record.agent.pid = json.at("agent_pid").get<pid_t>();
    record.agent.start_time = json.at("agent_start_time").get<std::uint64_t>();
    record.created_at = json.at("created_at").get<double>();
    record.spec = json.value("spec", nlohmann::json::object());
    return record;
  } catch (const nlohmann::json::exception& e) {
    return Status(ErrorCode::invalid_request, std::string("sandbox record: ") + e.what());
  }
}

Result<SandboxStore> SandboxStore::open_default() {
  std::string root;
  const char* xdg = std::getenv("XDG_STATE_HOME");
  if (xdg && *xdg == '/') {
    root = std::string(xdg) + "/gpubox";
  } else {
    const char* home = std::getenv("HOME");
    if (!home || *home != '/') {
      return Status(ErrorCode::invalid_request, "neither XDG_STATE_HOME nor HOME is an absolute path: nowhere to keep sandbox state");
    }
    root = std::string(home) + "/.local/state/gpubox";
  }
  return SandboxStore(root);
}

Result<SandboxRecord> SandboxStore::reserve(const std::string& name, const nlohmann::json& spec) {
  if (!name.empty() && !valid_sandbox_name(name)) {
    return Status(ErrorCode::invalid_request,
                  "--name '" + name + "': expected 1-63 of A-Z a-z 0-9 _ . - starting with a letter or digit");
  }
  std::error_code error;
  std::filesystem::create_directories(sandboxes_dir(), error);
  if (error) return Status(ErrorCode::permission_denied, "cannot create '" + sandboxes_dir() + "': " + error.message());
  ::chmod(root_.c_str(), 0700);
  StoreLock lock(root_);
  if (!lock.held()) return Status::from_errno(errno, "cannot lock '" + root_ + "/lock'");
  if (!name.empty()) {
    for (const auto& existing : list()) {
      if (existing.name == name) {
        return Status(ErrorCode::already_exists, "a sandbox named '" + name + "' exists already (" + existing.id + ")");
      }
    }
  }
  SandboxRecord record;
  for (int attempt = 0;; ++attempt) {
    record.id = random_id();
    record.dir = sandboxes_dir() + "/" + record.id;
    if (::mkdir(record.dir.c_str(), 0700) == 0) break;
    if (errno != EEXIST || attempt > 8) return Status::from_errno(errno, "cannot create '" + record.dir + "'");
  }
  record.name = name;
  record.endpoint = "ipc://" + record.agent_dir() + "/rpc.sock";
  record.created_at = now_seconds();
  record.spec = spec;
  Status made = make_dir(record.agent_dir(), 0700);
  if (made) made = make_dir(record.work_dir(), 0755);
  if (made) made = save(record);
  if (!made) {
    (void)remove(record);
    return made;
  }
  return record;
}

Status SandboxStore::save(const SandboxRecord& record) const {
  std::string path = record.dir + "/sandbox.json";
  std::string temp = path + ".tmp";
  int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return Status::from_errno(errno, "cannot write '" + temp + "'");
  std::string text = record.to_json().dump(2) + "\n";
  bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  if (!written || ::rename(temp.c_str(), path.c_str()) != 0) {
    int saved = errno;
    ::unlink(temp.c_str());
    return Status::from_errno(saved, "cannot write '" + path + "'");
  }
  return Status::ok();
}

Status SandboxStore::remove(const SandboxRecord& record) const {
  if (record.dir.empty() || record.dir.find(sandboxes_dir() + "/") != 0) {
    return Status(ErrorCode::internal, "refusing to remove '" + record.dir + "': not in the store");
  }
  std::error_code error;
  std::filesystem::remove_all(record.dir, error);
  if (error) return Status(ErrorCode::permission_denied, "cannot remove '" + record.dir + "': " + error.message());
  return Status::ok();
}

std::vector<SandboxRecord> SandboxStore::list() const {
  std::vector<SandboxRecord> records;
  DIR* dir = ::opendir(sandboxes_dir().c_str());
  if (!dir) return records;
  while (dirent* entry = ::readdir(dir)) {
    std::string id = entry->d_name;
    if (id.empty() || id[0] == '.') continue;
    std::ifstream in(sandboxes_dir() + "/" + id + "/sandbox.json");
    if (!in) continue;
    auto json = nlohmann::json::parse(in, nullptr, false);
    if (json.is_discarded()) continue;
    auto record = SandboxRecord::from_json(json);
    if (record) records.push_back(std::move(*record));
  }
  ::closedir(dir);
  std::sort(records.begin(), records.end(),
            [](const SandboxRecord& a, const SandboxRecord& b) { return a.created_at < b.created_at; });
  return records;
}

Result<SandboxRecord> SandboxStore::resolve(const std::string& id_or_name) const {
  if (id_or_name.empty()) return Status(ErrorCode::invalid_request, "expected a sandbox id or name");
  // The common case, an exact id, costs one file read.
  if (id_or_name.find('/') == std::string::npos && id_or_name[0] != '.') {
    std::ifstream in(sandboxes_dir() + "/" + id_or_name + "/sandbox.json");
    if (in) {
      auto json = nlohmann::json::parse(in, nullptr, false);
      if (!json.is_discarded()) {
        auto record = SandboxRecord::from_json(json);
        if (record) return record;
      }
    }
  }
  std::vector<SandboxRecord> by_prefix;
  for (auto& record : list()) {
    if (record.name == id_or_name) return record;
    if (record.id.rfind(id_or_name, 0) == 0) by_prefix.push_back(std::move(record));
  }
  if (by_prefix.size() == 1) return by_prefix[0];
  if (by_prefix.size() > 1) {
    return Status(ErrorCode::invalid_request, "'" + id_or_name + "' matches " + std::to_string(by_prefix.size()) +
                                                  " sandboxes: give more of the id");
  }
  return Status(ErrorCode::not_found, "no sandbox with id or name '" + id_or_name + "' (see gpubox ls)");
}

}  // namespace gpubox::host
