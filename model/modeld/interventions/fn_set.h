// FnSet: the fn op's functions model.fn_load keeps for one model, by name,
// and who may name, replace and unload each. Any thread: a request binds the
// functions it names at its start and holds them until it ends.
//
// A session is a secret the caller picks (check_session) and sends with each
// call: modeld sees one connection per call forwarded by the agent, and the
// same peer for every caller, so neither tells callers apart. Names are of three kinds:
//  - content names, "sha256:" and the archive's 64 hex digits, checked against
//    the archive: one per model for every caller, since no other function can
//    have that name. Each session that loaded one holds it; it stays loaded
//    while any does (calls without a session share one hold).
//  - a session's own names (any other name): only calls with that session
//    name, replace or unload them; they shadow shared ones for it.
//  - shared names (shared: true): every call names them; only the session
//    that loaded one unloads it.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "base/thread_annotations.h"
#include "model/modeld/interventions/load_cap.h"

namespace gpubox::modeld {

class UserFn;

// One loaded function and what names it: its archive's sha256 (lower-case hex) and size.
struct FnEntry {
  std::shared_ptr<const UserFn> fn;
  std::string sha256;
  std::size_t bytes = 0;
};

// One name as a set keeps it (FnSet::records, persisted_loads.h): a content
// name once per session that holds it; a chosen name with its owner's session.
struct FnRecord {
  std::string name;
  std::string session;  // "": calls without one (content names only)
  bool shared = false;
  std::string sha256;
  bool operator==(const FnRecord&) const = default;
};

// ok for "" (no session) or 16 to 128 printable ASCII characters; else
// invalid_request naming params.session.
Status check_session(const std::string& session);

class FnSet {
 public:
  explicit FnSet(LoadCap cap = function_cap()) : cap_(std::move(cap)) {}

  // invalid_request naming params.name or params.session when the load cannot
  // be taken whatever is loaded: a content name that is not sha256 (naming the
  // archive's own), a name of the caller's choice without a session.
  static Status check_load(const std::string& name, const std::string& sha256, const std::string& session);
  // resource_exhausted (LoadCap) when one more function of bytes would pass the cap.
  Status admits(std::size_t bytes) const;
  // Adds entry under name for session (check_load's and the cap's refusals
  // first); a content name already loaded gains session as a holder.
  // already_exists naming the held function's sha256 when the session's
  // own name, or the shared name, is taken. {name, bytes, sha256, scope}.
  Result<nlohmann::json> add(const std::string& name, const std::string& session, bool shared, FnEntry entry);
  // not_found naming those session can name; permission_denied for another
  // session's shared name, or a content name session does not hold.
  Status remove(const std::string& name, const std::string& session);
  // invalid_request at where naming those session can name when none is called name.
  Result<std::shared_ptr<const UserFn>> find(const std::string& name, const std::string& session, const std::string& where) const;
  // What session can name: [{name, bytes, sha256, scope: "content" | "session" | "shared"}].
  nlohmann::json list(const std::string& session) const;
  // Every name and who holds or owns it, sessions included: what add()
  // needs to load the same set again (a modeld restart, persisted_loads.h).
  std::vector<FnRecord> records() const;

 private:
  struct Held {
    FnEntry entry;
    std::string owner;              // chosen names: the session that loaded it
    std::set<std::string> holders;  // content names: the sessions that hold it ("": calls without one)
  };
  using Key = std::pair<std::string, std::string>;  // (session, or "" for a shared name; name)

  nlohmann::json list_locked(const std::string& session) const REQUIRES(mutex_);
  std::string names(const std::string& session) const REQUIRES(mutex_);  // "a, b", or "none"
  Status admits_locked(std::size_t bytes) const REQUIRES(mutex_);

  const LoadCap cap_;
  mutable Mutex mutex_;
  std::map<std::string, Held> content_ GUARDED_BY(mutex_);  // by content name
  std::map<Key, Held> chosen_ GUARDED_BY(mutex_);
};

}  // namespace gpubox::modeld
