// PersistedLoads: what callers loaded into each model at run time (model.fn_load's
// functions with their names, sessions and shared flags; model.sae_load's SAEs),
// kept in a private directory beside the models file so that a restarted modeld
// loads them again with the model. Any thread (one mutex); no LibTorch.
//
// The directory (mode 0700) holds loaded.json, {"models": {NAME: {"fns":
// [{name, session, shared, sha256}], "saes": [{name, path, hook}]}}}, and each
// function's TorchScript archive as SHA256.pt; every file is mode 0600 and
// replaced whole (private_file.h). Sessions are secrets: only modeld reads them.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "base/thread_annotations.h"
#include "model/modeld/interventions/fn_set.h"
#include "model/modeld/config/host_config.h"

namespace gpubox::modeld {

// What one model had loaded at run time, in the order it was loaded.
struct ModelLoads {
  std::vector<FnRecord> fns;
  std::vector<SaeLoadSpec> saes;  // every SAE it held, modeld.json's own included
};

class PersistedLoads {
 public:
  // directory: "" keeps nothing. Otherwise it is made (0700) and its
  // loaded.json read; what cannot be read or is malformed (the whole file, or
  // one entry) is dropped and said in dropped(), naming the file and entry.
  explicit PersistedLoads(std::string directory);
  PersistedLoads(const PersistedLoads&) = delete;
  PersistedLoads& operator=(const PersistedLoads&) = delete;

  bool enabled() const { return !directory_.empty(); }
  // Why reading dropped what it dropped, one line each (the caller logs them).
  const std::vector<std::string>& dropped() const { return dropped_; }
  // What model had loaded; nullopt when nothing is kept for it (its modeld.json entry alone).
  std::optional<ModelLoads> loads(const std::string& model) const;
  // The archive of sha256, checked against its name; invalid_request naming
  // the file when it is damaged (truncated, changed), else the read's error.
  Result<std::string> read_archive(const std::string& sha256) const;
  // model's loads become loads (loaded.json rewritten); archives no model names
  // any more are removed. archive: the bytes of the function of sha256 just
  // loaded, written first unless it is there already.
  Status save(const std::string& model, ModelLoads loads, const std::string& sha256 = "", std::string_view archive = {});
  // Forgets model, as save does.
  Status forget(const std::string& model);
  // Forgets every model not in models (kept from a run whose models file has since lost them).
  Status retain(const std::vector<std::string>& models);

  std::string file() const { return directory_ + "/loaded.json"; }
  std::string archive_path(const std::string& sha256) const { return directory_ + "/" + sha256 + ".pt"; }

 private:
  void read();
  Status write_locked() REQUIRES(mutex_);
  Status keep_archive_locked(const std::string& sha256, std::string_view bytes) REQUIRES(mutex_);

  std::string directory_;
  std::vector<std::string> dropped_;
  mutable Mutex mutex_;
  std::map<std::string, ModelLoads> models_ GUARDED_BY(mutex_);
};

}  // namespace gpubox::modeld
