#include "model/modeld/registry/persisted_loads.h"

#include <dirent.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "base/sha256.h"
#include "model/modeld/config/private_file.h"

namespace gpubox::modeld {
namespace {

bool is_sha256(const std::string& text) {
  std::string lower = text;
  return normalize_sha256_hex(lower) && lower == text;
}

// One entry of a model's "fns"; where names it in the refusal.
Result<FnRecord> parse_fn_record(const nlohmann::json& entry, const std::string& where) {
  auto bad = [&](const std::string& what) { return Status::invalid_request(fmt::format("{}: {}", where, what)); };
  if (!entry.is_object()) return bad("must be an object {name, session, shared, sha256}");
  FnRecord record;
  if (!entry.contains("name") || !entry["name"].is_string()) return bad("\"name\" must be a string");
  if (!entry.contains("session") || !entry["session"].is_string()) return bad("\"session\" must be a string");
  if (!entry.contains("shared") || !entry["shared"].is_boolean()) return bad("\"shared\" must be true or false");
  if (!entry.contains("sha256") || !entry["sha256"].is_string() || !is_sha256(entry["sha256"])) {
    return bad("\"sha256\" must be 64 lower-case hex digits");
  }
  record = {entry["name"], entry["session"], entry["shared"], entry["sha256"]};
  if (Status s = check_session(record.session); !s) return bad(s.message());
  if (Status s = FnSet::check_load(record.name, record.sha256, record.session); !s) return bad(s.message());
  return record;
}

}  // namespace

PersistedLoads::PersistedLoads(std::string directory) : directory_(std::move(directory)) {
  if (directory_.empty()) return;
  std::string why;
  struct stat info {};
  if (::mkdir(directory_.c_str(), 0700) != 0 && errno != EEXIST) {
    why = std::strerror(errno);
  } else if (::lstat(directory_.c_str(), &info) != 0) {
    why = std::strerror(errno);
  } else if (!S_ISDIR(info.st_mode) || info.st_uid != ::geteuid()) {
    why = "not a directory of modeld's own";
  } else if (::chmod(directory_.c_str(), 0700) != 0) {
    why = std::strerror(errno);
  }
  if (!why.empty()) {
    dropped_.push_back(fmt::format("{}: cannot be modeld's private directory ({}); functions and SAEs loaded now are not "
                                   "kept for a restart", directory_, why));
    directory_.clear();
    return;
  }
  read();
}

void PersistedLoads::read() {
  std::string path = file();
  auto text = read_private_file(path);
  if (!text) {
    if (text.status().code() != ErrorCode::not_found) dropped_.push_back(text.status().message() + "; nothing kept is loaded again");
    return;
  }
  nlohmann::json kept = nlohmann::json::parse(*text, nullptr, false);
  if (kept.is_discarded() || !kept.is_object() || !kept.contains("models") || !kept["models"].is_object()) {
    dropped_.push_back(fmt::format("{}: damaged (not a JSON object {{\"models\": {{...}}}}); the functions and SAEs it kept "
                                   "are dropped", path));
    return;
  }
  MutexLock lock(mutex_);
  for (const auto& [model, value] : kept["models"].items()) {
    ModelLoads loads;
    std::string where = fmt::format("{}: models.{}", path, model);
    const nlohmann::json fns = value.is_object() ? value.value("fns", nlohmann::json::array()) : nlohmann::json();
    const nlohmann::json saes = value.is_object() ? value.value("saes", nlohmann::json::array()) : nlohmann::json();
    if (!fns.is_array() || !saes.is_array()) {
      dropped_.push_back(where + ": must be an object {fns: [...], saes: [...]}; dropped");
      continue;
    }
    for (std::size_t i = 0; i < fns.size(); ++i) {
      auto record = parse_fn_record(fns[i], fmt::format("{}.fns[{}]", where, i));
      if (record) loads.fns.push_back(std::move(*record));
      else dropped_.push_back(record.status().message() + "; dropped");
    }
    for (std::size_t i = 0; i < saes.size(); ++i) {
      auto sae = parse_sae_load_spec(saes[i], fmt::format("{}.saes[{}]", where, i));
      if (sae) loads.saes.push_back(std::move(*sae));
      else dropped_.push_back(sae.status().message() + "; dropped");
    }
    models_[model] = std::move(loads);
  }
}

std::optional<ModelLoads> PersistedLoads::loads(const std::string& model) const {
  MutexLock lock(mutex_);
  auto found = models_.find(model);
  if (found == models_.end()) return std::nullopt;
  return found->second;
}

Result<std::string> PersistedLoads::read_archive(const std::string& sha256) const {
  std::string path = archive_path(sha256);
  auto bytes = read_private_file(path);
  if (!bytes) return bytes.status();
  Sha256 hash;
  hash.update(bytes->data(), bytes->size());
  std::string actual = hash.hex_digest();
  if (actual != sha256) {
    return Status::invalid_request(fmt::format("{}: damaged: its {} bytes hash to sha256:{}, not the sha256 it is named by "
                                               "(truncated or changed)", path, bytes->size(), actual));
  }
  return bytes;
}

Status PersistedLoads::keep_archive_locked(const std::string& sha256, std::string_view bytes) {
  std::string path = archive_path(sha256);
  struct stat info {};
  if (::lstat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode) && static_cast<std::size_t>(info.st_size) == bytes.size()) {
    return {};
  }
  return write_private_file(path, bytes);
}

Status PersistedLoads::save(const std::string& model, ModelLoads loads, const std::string& sha256, std::string_view archive) {
  if (!enabled()) return {};
  MutexLock lock(mutex_);
  if (!archive.empty()) {
    if (Status kept = keep_archive_locked(sha256, archive); !kept) return kept;
  }
  models_[model] = std::move(loads);
  return write_locked();
}

Status PersistedLoads::forget(const std::string& model) {
  if (!enabled()) return {};
  MutexLock lock(mutex_);
  if (models_.erase(model) == 0) return {};
  return write_locked();
}

Status PersistedLoads::retain(const std::vector<std::string>& models) {
  if (!enabled()) return {};
  MutexLock lock(mutex_);
  std::set<std::string> keep(models.begin(), models.end());
  for (auto it = models_.begin(); it != models_.end();) it = keep.count(it->first) ? std::next(it) : models_.erase(it);
  return write_locked();
}

Status PersistedLoads::write_locked() {
  nlohmann::json out = {{"models", nlohmann::json::object()}};
  std::set<std::string> named;
  for (const auto& [model, loads] : models_) {
    nlohmann::json fns = nlohmann::json::array(), saes = nlohmann::json::array();
    for (const auto& fn : loads.fns) {
      fns.push_back({{"name", fn.name}, {"session", fn.session}, {"shared", fn.shared}, {"sha256", fn.sha256}});
      named.insert(fn.sha256 + ".pt");
    }
    for (const auto& sae : loads.saes) saes.push_back(sae_load_spec_json(sae));
    out["models"][model] = {{"fns", std::move(fns)}, {"saes", std::move(saes)}};
  }
  if (Status written = write_private_file(file(), out.dump(2) + "\n"); !written) return written;
  // Archives nobody names any more: loaded.json no longer leads to them.
  if (DIR* dir = ::opendir(directory_.c_str())) {
    while (const dirent* item = ::readdir(dir)) {
      std::string name = item->d_name;
      if (name.size() == 67 && name.compare(64, 3, ".pt") == 0 && !named.count(name)) ::unlink((directory_ + "/" + name).c_str());
    }
    ::closedir(dir);
  }
  return {};
}

}  // namespace gpubox::modeld
