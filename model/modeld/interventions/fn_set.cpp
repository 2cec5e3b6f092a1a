#include "model/modeld/interventions/fn_set.h"

#include <algorithm>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <vector>

namespace gpubox::modeld {
namespace {

constexpr std::string_view kContentPrefix = "sha256:";
constexpr std::size_t kLongestName = 200;

bool is_content_name(const std::string& name) { return name.compare(0, kContentPrefix.size(), kContentPrefix) == 0; }

bool is_lower_hex64(std::string_view text) {
  return text.size() == 64 && std::all_of(text.begin(), text.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

}  // namespace

Status check_session(const std::string& session) {
  if (session.empty()) return {};
  bool printable = std::all_of(session.begin(), session.end(), [](char c) { return c > ' ' && c < 0x7f; });
  if (session.size() < 16 || session.size() > 128 || !printable) {
    return Status::invalid_request(fmt::format("params.session: expected 16 to 128 printable ASCII characters without spaces, a secret "
                                               "your client picks once (e.g. 32 random hex digits); got {} characters{}",
                                               session.size(), printable ? "" : ", not all printable"));
  }
  return {};
}

Status FnSet::check_load(const std::string& name, const std::string& sha256, const std::string& session) {
  if (name.empty()) return Status::invalid_request("params.name: expected a non-empty name");
  if (name.size() > kLongestName) {
    return Status::invalid_request(fmt::format("params.name: {} characters; a name has at most {}", name.size(), kLongestName));
  }
  if (is_content_name(name)) {
    std::string_view hex = std::string_view(name).substr(kContentPrefix.size());
    if (!is_lower_hex64(hex)) {
      return Status::invalid_request(fmt::format("params.name: \"{}\" begins with sha256:, which names an archive by its content: "
                                                 "sha256: and its 64 lower-case hex digits (this archive's is sha256:{})",
                                                 name, sha256));
    }
    if (hex != sha256) {
      return Status::invalid_request(fmt::format("params.name: \"{}\" is not this archive's content name: the archive hashes to sha256:{}",
                                                 name, sha256));
    }
    return {};
  }
  if (session.empty()) {
    return Status::invalid_request(fmt::format("params.session: a name you choose (\"{}\") is kept per session: send session (a secret "
                                               "your client picks), with shared: true to let every caller name it, or load it "
                                               "under its content name sha256:{}", name, sha256));
  }
  return {};
}

Status FnSet::admits(std::size_t bytes) const {
  MutexLock lock(mutex_);
  return admits_locked(bytes);
}

Status FnSet::admits_locked(std::size_t bytes) const {
  std::size_t held = 0;
  for (const auto& [name, fn] : content_) held += fn.entry.bytes;
  for (const auto& [key, fn] : chosen_) held += fn.entry.bytes;
  return cap_.admits(content_.size() + chosen_.size(), held, bytes);
}

Result<nlohmann::json> FnSet::add(const std::string& name, const std::string& session, bool shared, FnEntry entry) {
  if (Status s = check_load(name, entry.sha256, session); !s) return s;
  auto describe = [&name](const FnEntry& held, const char* scope) {
    return nlohmann::json{{"name", name}, {"bytes", held.bytes}, {"sha256", held.sha256}, {"scope", scope}};
  };
  MutexLock lock(mutex_);
  if (is_content_name(name)) {
    auto found = content_.find(name);
    if (found != content_.end()) {
      found->second.holders.insert(session);
      return describe(found->second.entry, "content");
    }
    if (Status s = admits_locked(entry.bytes); !s) return s;
    Held& held = content_[name];
    held.entry = std::move(entry);
    held.holders.insert(session);
    return describe(held.entry, "content");
  }
  Key key{shared ? std::string() : session, name};
  if (auto found = chosen_.find(key); found != chosen_.end()) {
    std::string whose = shared ? fmt::format("a shared function \"{}\"", name) : fmt::format("this session's function \"{}\"", name);
    std::string next = shared ? "the session that loaded it can model.fn_unload it; or choose another name"
                              : "model.fn_unload it first, or choose another name";
    return Status(ErrorCode::already_exists,
                  fmt::format("params.name: {} is already loaded (sha256:{}); {}", whose, found->second.entry.sha256, next));
  }
  if (Status s = admits_locked(entry.bytes); !s) return s;
  Held& held = chosen_[key];
  held.entry = std::move(entry);
  held.owner = session;
  return describe(held.entry, shared ? "shared" : "session");
}

Status FnSet::remove(const std::string& name, const std::string& session) {
  MutexLock lock(mutex_);
  if (is_content_name(name)) {
    auto found = content_.find(name);
    if (found != content_.end()) {
      if (found->second.holders.erase(session) == 0) {
        return {ErrorCode::permission_denied, fmt::format("params.name: \"{}\" is held by other sessions, not this one; it stays "
                                                          "loaded while any holds it", name)};
      }
      if (found->second.holders.empty()) content_.erase(found);
      return {};
    }
  } else {
    if (!session.empty() && chosen_.erase(Key{session, name}) == 1) return {};
    auto shared = chosen_.find(Key{std::string(), name});
    if (shared != chosen_.end()) {
      if (shared->second.owner != session) {
        return {ErrorCode::permission_denied, fmt::format("params.name: the shared function \"{}\" belongs to the session that "
                                                          "loaded it; only that session can unload it", name)};
      }
      chosen_.erase(shared);
      return {};
    }
  }
  return {ErrorCode::not_found, fmt::format("params.name: no function \"{}\" that this session can name (loaded: {}; names are "
                                            "per session unless shared)", name, names(session))};
}

Result<std::shared_ptr<const UserFn>> FnSet::find(const std::string& name, const std::string& session, const std::string& where) const {
  MutexLock lock(mutex_);
  if (is_content_name(name)) {
    if (auto found = content_.find(name); found != content_.end()) return found->second.entry.fn;
  } else {
    if (!session.empty()) {
      if (auto own = chosen_.find(Key{session, name}); own != chosen_.end()) return own->second.entry.fn;
    }
    if (auto shared = chosen_.find(Key{std::string(), name}); shared != chosen_.end()) return shared->second.entry.fn;
  }
  return Status::invalid_request(fmt::format("{}: no function \"{}\" is loaded for this model (loaded: {}; names you choose are per "
                                             "session: send the session that loaded it; model.fn_load loads one)",
                                             where, name, names(session)));
}

nlohmann::json FnSet::list(const std::string& session) const {
  MutexLock lock(mutex_);
  return list_locked(session);
}

nlohmann::json FnSet::list_locked(const std::string& session) const {
  nlohmann::json out = nlohmann::json::array();
  auto entry = [](const std::string& name, const Held& held, const char* scope) {
    return nlohmann::json{{"name", name}, {"bytes", held.entry.bytes}, {"sha256", held.entry.sha256}, {"scope", scope}};
  };
  for (const auto& [name, held] : content_) {
    if (held.holders.count(session)) out.push_back(entry(name, held, "content"));
  }
  for (const auto& [key, held] : chosen_) {
    if (key.first.empty()) {
      out.push_back(entry(key.second, held, "shared"));
    } else if (key.first == session) {
      out.push_back(entry(key.second, held, "session"));
    }
  }
  return out;
}

std::vector<FnRecord> FnSet::records() const {
  MutexLock lock(mutex_);
  std::vector<FnRecord> out;
  for (const auto& [name, held] : content_) {
    for (const auto& session : held.holders) out.push_back({name, session, false, held.entry.sha256});
  }
  for (const auto& [key, held] : chosen_) out.push_back({key.second, held.owner, key.first.empty(), held.entry.sha256});
  return out;
}

std::string FnSet::names(const std::string& session) const {
  std::vector<std::string> names;
  for (const auto& item : list_locked(session)) names.push_back(item["name"].get<std::string>());
  return names.empty() ? std::string("none") : fmt::format("{}", fmt::join(names, ", "));
}

}  // namespace gpubox::modeld
