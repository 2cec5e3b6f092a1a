// ModelRegistry: the models of one modeld by name. Each loads on its own thread
// (state loading → ready or failed, progress visible); a call holds a
// shared_ptr, so unloading never pulls weights from under a running call.
// The list is kept in modeld's models file, and what callers load into each
// model at run time (functions, SAEs) beside it (persisted_loads.h), so a
// restarted modeld loads both again, each model's before it is ready.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "base/thread_annotations.h"
#include "model/chat/chat_template.h"
#include "model/modeld/scheduler/batch_scheduler.h"
#include "model/modeld/decoder/decoder.h"
#include "model/modeld/config/host_config.h"
#include "model/modeld/scheduler/kv_budget.h"
#include "model/modeld/registry/persisted_loads.h"
#include "model/modeld/interventions/sae_set.h"
#include "model/tokenizer/tokenizer.h"
#include "model/modeld/interventions/user_fn.h"
#include "model/weights/checkpoint.h"
#include "base/status.h"

namespace gpubox::modeld {

using KvShares = std::vector<std::unique_ptr<KvBudget::Share>>;

struct LoadedModel {
  KvShares kv_shares;  // its place in each of its GPUs' budgets (none on the CPU); given back last
  ModelLoadSpec spec;
  Architecture architecture;
  std::unique_ptr<weights::Checkpoint> checkpoint;
  std::unique_ptr<Decoder> decoder;
  std::unique_ptr<BatchScheduler> scheduler;  // every call's passes run on it (batch_scheduler.h)
  std::unique_ptr<tokenizer::Tokenizer> tokenizer;  // null when the directory has no tokenizer.json
  std::shared_ptr<const chat::ChatTemplates> chat;   // null without tokenizer_config.json or when its template is refused
  std::string chat_error;                            // why the chat template was refused (the model still loads)
  double load_seconds = 0;
  std::shared_ptr<SaeSet> saes = std::make_shared<SaeSet>();  // changes while the model is ready (thread-safe)
  std::shared_ptr<FnSet> fns = std::make_shared<FnSet>();     // model.fn_load's (thread-safe)
};

class ModelRegistry {
 public:
  // config_path: the models file modeld started from; every add and remove
  // rewrites it, so that a restarted modeld loads what was loaded (none: "").
  // Functions and SAEs are kept in the directory config_path + ".loaded".
  explicit ModelRegistry(std::string config_path = "",
                         std::shared_ptr<const DeviceMemory> memory = std::make_shared<NvmlDeviceMemory>());
  ~ModelRegistry();  // waits for loads in progress
  ModelRegistry(const ModelRegistry&) = delete;
  ModelRegistry& operator=(const ModelRegistry&) = delete;

  // Starts loading; already_exists when the name is taken by a model loading or ready (a failed one is replaced).
  Status add(const ModelLoadSpec& spec);
  // modeld's start: adds each of the models file's specs (a refusal is
  // logged) and forgets the functions and SAEs kept for any other model.
  void start(const std::vector<ModelLoadSpec>& specs);
  // Keeps what model has loaded now (its functions and SAEs) for a restart,
  // when it is still the ready model of its name; archive: the TorchScript
  // archive of a function just loaded, named by its sha256. A failure is logged.
  void keep_loads(const std::shared_ptr<const LoadedModel>& model, const std::string& sha256 = "", std::string_view archive = {});
  // Forgets a model (loaded, loading or failed); not_found when there is none.
  // What it gives back expires once no running call holds the model any more
  // (its memory is released then; at once when none does).
  Result<std::weak_ptr<const LoadedModel>> remove(const std::string& name);
  // The ready model: not_found, or unavailable while it loads or after it failed (the message says why).
  // A split model one of whose ranks failed is down: unavailable, naming the
  // rank, and loaded again from its spec (once the calls holding it are over).
  Result<std::shared_ptr<const LoadedModel>> ready(const std::string& name);
  // {"models": [{name, state, bytes_loaded, bytes_total, tensors_loaded, tensors_total, error?}]}
  // A split model that went down is listed as loading: it starts loading again here, as on its next call.
  nlohmann::json status();
  // How each GPU's memory is split among its models' weights and KV caches (KvBudget::status).
  nlohmann::json kv_budget() const { return kv_budget_.status(); }
  std::vector<std::string> names() const;

 private:
  struct Entry {
    ModelLoadSpec spec;
    LoadProgress progress;
    std::string state = "loading";  // loading, ready, failed
    std::string error;
    std::shared_ptr<const LoadedModel> model;
    KvShares kv_shares;  // until the loader takes them
    // A model that went down, which this load replaces: dropped by the loader
    // (its release may wait for a collective's timeout), then waited for.
    std::shared_ptr<const LoadedModel> replaces;
  };
  // Replaces a ready model that went down by a new load of its spec.
  void reload_locked(std::vector<std::shared_ptr<Entry>>::iterator down) REQUIRES(mutex_);
  void load(std::shared_ptr<Entry> entry);
  void save_locked() const REQUIRES(mutex_);
  void save_loads_locked(const LoadedModel& model, const std::string& sha256 = "", std::string_view archive = {}) const
      REQUIRES(mutex_);

  const std::string config_path_;
  mutable PersistedLoads loads_;  // what callers loaded into each model at run time (thread-safe)
  KvBudget kv_budget_;
  mutable Mutex mutex_;
  std::vector<std::shared_ptr<Entry>> entries_ GUARDED_BY(mutex_);
  std::vector<std::thread> loaders_ GUARDED_BY(mutex_);
};

// The model's place in the budget of each GPU it runs on (one per rank); none on the CPU.
KvShares join_kv_budget(KvBudget& budget, const ModelLoadSpec& spec);

// Loads one model directory (config.json, generation_config.json, safetensors, tokenizer.json,
// tokenizer_config.json's chat template). kv_shares: join_kv_budget's, joined before the load began.
Result<std::unique_ptr<LoadedModel>> load_model(const ModelLoadSpec& spec, LoadProgress& progress, KvShares kv_shares);

}  // namespace gpubox::modeld
