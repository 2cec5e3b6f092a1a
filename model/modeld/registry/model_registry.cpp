#include "model/modeld/registry/model_registry.h"

#include <chrono>
#include <cstdio>
#include <limits>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <fstream>
#include <sys/stat.h>

#include "base/thread_annotations.h"
#include "model/modeld/gpu/cuda_runtime.h"
#include "model/modeld/registry/model_loads.h"
#include "model/modeld/decoder/tensor_wire.h"

namespace gpubox::modeld {
namespace {

// A JSON file of the model directory; a missing optional file is a null value.
Result<nlohmann::json> read_json(const std::string& path, bool required) {
  std::ifstream in(path);
  if (!in) {
    if (!required) return nlohmann::json();
    return Status(ErrorCode::not_found, path + ": cannot be read (a Hugging Face model directory has config.json)");
  }
  nlohmann::json value = nlohmann::json::parse(in, nullptr, false);
  if (value.is_discarded()) return Status(ErrorCode::invalid_request, path + ": not valid JSON");
  return value;
}

Result<c10::Device> parse_device(const std::string& name) {
  if (name == "cpu") return c10::Device(c10::kCPU);
  if (Status s = enable_cuda(); !s) return s;
  int index = name == "cuda" ? 0 : std::stoi(name.substr(5));
  int count = cuda_device_count();
  if (index >= count) {
    return Status(ErrorCode::invalid_request, fmt::format("device {}: this machine has {} CUDA device(s)", name, count));
  }
  return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(index));
}

// Replaces a hidden model's directory in a message.
std::string scrub(const ModelLoadSpec& spec, std::string message) {
  if (!spec.hidden) return message;
  for (std::size_t at = message.find(spec.path); at != std::string::npos; at = message.find(spec.path, at)) {
    message.replace(at, spec.path.size(), "<hidden>");
  }
  return message;
}

}  // namespace

KvShares join_kv_budget(KvBudget& budget, const ModelLoadSpec& spec) {
  KvShares shares;
  auto devices = rank_devices(spec);
  if (!devices) return shares;  // the load fails on the same spec, naming why
  for (const auto& device : *devices) {
    if (device != "cuda" && device.rfind("cuda:", 0) != 0) continue;
    shares.push_back(budget.join(device == "cuda" ? 0 : std::atoi(device.c_str() + 5), spec.name));
  }
  return shares;
}

Result<std::unique_ptr<LoadedModel>> load_model(const ModelLoadSpec& spec, LoadProgress& progress, KvShares kv_shares) {
  auto started = std::chrono::steady_clock::now();
  auto model = std::make_unique<LoadedModel>();
  model->kv_shares = std::move(kv_shares);
  model->spec = spec;
  auto config = read_json(spec.path + "/config.json", true);
  if (!config) return config.status();
  auto generation = read_json(spec.path + "/generation_config.json", false);
  if (!generation) return generation.status();
  auto arch = parse_architecture(*config, generation->is_null() ? nullptr : &*generation, spec.path + "/config.json");
  if (!arch) return arch.status();
  model->architecture = std::move(*arch);
  auto dtype = model_dtype_from_name(spec.dtype);
  if (!dtype) return dtype.status();
  auto device_names = rank_devices(spec);
  if (!device_names) return device_names.status();
  std::vector<c10::Device> devices;
  for (const auto& name : *device_names) {
    auto device = parse_device(name);
    if (!device) return device.status();
    devices.push_back(*device);
  }
  const c10::Device device = devices[0];  // rank 0's: where the SAEs and the caller's functions run
  auto checkpoint = weights::Checkpoint::open_dir(spec.path);
  if (!checkpoint) return checkpoint.status();
  model->checkpoint = std::move(*checkpoint);
  auto decoder = Decoder::load(model->architecture, *model->checkpoint, *dtype, devices, progress);
  if (!decoder) return decoder.status();
  model->decoder = std::move(*decoder);
  std::optional<std::uint64_t> requested;
  if (spec.kv_cache_mb) requested = static_cast<std::uint64_t>(*spec.kv_cache_mb) << 20;
  std::uint64_t kv_bytes = 0;
  if (!model->kv_shares.empty()) {
    // Each rank's pool holds its KV heads: a 1/N part of the pool on each device, the smallest grant for
    // all; what a larger grant held beyond it goes back to its device.
    const auto ranks = static_cast<std::uint64_t>(model->kv_shares.size());
    auto rank_bytes = model->decoder->rank_weight_bytes();
    for (std::size_t r = 0; r < model->kv_shares.size(); ++r) model->kv_shares[r]->weights_loaded(rank_bytes[r]);
    std::optional<std::uint64_t> requested_part;
    if (requested) requested_part = *requested / ranks;
    const std::uint64_t useful_part = useful_kv_pool_bytes(*model->decoder, spec.max_batch) / ranks;
    std::uint64_t part = std::numeric_limits<std::uint64_t>::max();
    for (auto& share : model->kv_shares) {
      auto granted = share->pool_bytes(requested_part, useful_part);
      if (!granted) return granted.status();
      part = std::min(part, *granted);
    }
    for (auto& share : model->kv_shares) share->keep(part);
    kv_bytes = part * ranks;
  } else {
    kv_bytes = requested ? *requested : default_kv_pool_bytes(*model->decoder);
  }
  try {
    auto pool = std::make_unique<KvPool>(*model->decoder, kv_bytes);
    model->scheduler = std::make_unique<BatchScheduler>(spec.name, *model->decoder, std::move(pool),
                                                        SchedulerLimits{spec.max_batch, spec.max_queue});
  } catch (const c10::Error& e) {
    return Status(ErrorCode::resource_exhausted,
                  fmt::format("the KV cache of {} MiB does not fit on {} (set kv_cache_mb lower): {}", kv_bytes >> 20,
                              device.str(), e.what_without_backtrace()));
  }
  std::string tokenizer_path = spec.path + "/tokenizer.json";
  struct stat info {};
  if (::stat(tokenizer_path.c_str(), &info) == 0) {
    auto tokenizer = tokenizer::Tokenizer::from_file(tokenizer_path);
    if (!tokenizer) return tokenizer.status();
    model->tokenizer = std::move(*tokenizer);
  }
  auto chat = chat::ChatTemplates::from_directory(spec.path);
  if (chat) model->chat = *chat;
  else model->chat_error = chat.status().message();
  for (std::size_t i = 0; i < spec.saes.size(); ++i) {
    auto sae = load_sae(spec.saes[i], model->architecture, device, fmt::format("saes[{}]", i));
    if (!sae) return sae.status();
    if (Status added = model->saes->add(std::move(*sae)); !added) return added;
  }
  model->load_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return model;
}

ModelRegistry::ModelRegistry(std::string config_path, std::shared_ptr<const DeviceMemory> memory)
    : config_path_(std::move(config_path)),
      loads_(config_path_.empty() ? std::string() : config_path_ + ".loaded"),
      kv_budget_(std::move(memory)) {
  for (const auto& line : loads_.dropped()) std::fprintf(stderr, "gpubox-modeld: %s\n", line.c_str());
}

void ModelRegistry::start(const std::vector<ModelLoadSpec>& specs) {
  std::vector<std::string> names;
  for (const auto& spec : specs) names.push_back(spec.name);
  if (Status kept = loads_.retain(names); !kept) {
    std::fprintf(stderr, "gpubox-modeld: %s\n", kept.message().c_str());
  }
  for (const auto& spec : specs) {
    if (Status added = add(spec); !added) std::fprintf(stderr, "gpubox-modeld: %s\n", added.to_string().c_str());
  }
}

ModelRegistry::~ModelRegistry() {
  std::vector<std::thread> loaders;
  {
    MutexLock lock(mutex_);
    loaders.swap(loaders_);
  }
  for (auto& loader : loaders) loader.join();
}

Status ModelRegistry::add(const ModelLoadSpec& spec) {
  MutexLock lock(mutex_);
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if ((*it)->spec.name != spec.name) continue;
    if ((*it)->state != "failed") {
      return {ErrorCode::already_exists, fmt::format("model \"{}\" is already {}; unload it first", spec.name, (*it)->state)};
    }
    entries_.erase(it);  // a failed load holds nothing: the new one takes its place
    break;
  }
  auto entry = std::make_shared<Entry>();
  entry->spec = spec;
  entry->kv_shares = join_kv_budget(kv_budget_, spec);  // now, so that models loading together split the device
  entries_.push_back(entry);
  loaders_.emplace_back([this, entry] { load(entry); });
  save_locked();
  return Status::ok();
}

void ModelRegistry::reload_locked(std::vector<std::shared_ptr<Entry>>::iterator down) {
  std::fprintf(stderr, "gpubox-modeld: model \"%s\" is down (%s); loading it again\n", (*down)->spec.name.c_str(),
               (*down)->model->decoder->failure().c_str());
  auto entry = std::make_shared<Entry>();
  entry->spec = (*down)->spec;
  entry->replaces = (*down)->model;
  *down = entry;  // the old entry's budget share goes with it, once the calls holding its model are over
  entry->kv_shares = join_kv_budget(kv_budget_, entry->spec);
  loaders_.emplace_back([this, entry] { load(entry); });
}

void ModelRegistry::save_locked() const {
  if (config_path_.empty()) return;
  std::vector<ModelLoadSpec> specs;
  for (const auto& entry : entries_) specs.push_back(entry->spec);
  if (Status saved = write_host_config(config_path_, specs); !saved) {
    std::fprintf(stderr, "gpubox-modeld: the models file is not updated (a restart reloads the older list): %s\n",
                 saved.message().c_str());
  }
}

void ModelRegistry::keep_loads(const std::shared_ptr<const LoadedModel>& model, const std::string& sha256,
                               std::string_view archive) {
  if (!loads_.enabled()) return;
  MutexLock lock(mutex_);
  bool current = false;
  for (const auto& entry : entries_) current = current || entry->model == model;
  if (!current) return;  // unloaded meanwhile: nothing of it is kept
  save_loads_locked(*model, sha256, archive);
}

void ModelRegistry::save_loads_locked(const LoadedModel& model, const std::string& sha256, std::string_view archive) const {
  if (Status saved = loads_.save(model.spec.name, loads_of(model), sha256, archive); !saved) {
    std::fprintf(stderr, "gpubox-modeld: model \"%s\": its functions and SAEs are not kept for a restart: %s\n",
                 model.spec.name.c_str(), saved.message().c_str());
  }
}

void ModelRegistry::load(std::shared_ptr<Entry> entry) {
  // A model that went down is released first (its devices' memory), here or when its last call ends.
  std::weak_ptr<const LoadedModel> replaced = entry->replaces;
  entry->replaces.reset();
  for (int waited = 0; !replaced.expired() && waited < 600; ++waited) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  // What callers had loaded into this model before a restart: loaded with it, before it is ready.
  std::optional<ModelLoads> kept = loads_.loads(entry->spec.name);
  ModelLoadSpec spec = entry->spec;
  if (kept) spec.saes = spec_saes_kept(spec.saes, *kept);
  Result<std::unique_ptr<LoadedModel>> loaded = Status(ErrorCode::internal, "not loaded");
  try {
    loaded = load_model(spec, entry->progress, std::move(entry->kv_shares));
  } catch (const std::exception& e) {
    loaded = Status(ErrorCode::internal, e.what());
  }
  if (loaded && kept) {
    try {
      restore_loads(**loaded, *kept, loads_);
    } catch (const std::exception& e) {  // never fails the model
      std::fprintf(stderr, "gpubox-modeld: model \"%s\": loading its functions and SAEs again stopped: %s\n",
                   spec.name.c_str(), e.what());
    }
  }
  MutexLock lock(mutex_);
  if (loaded) {
    entry->model = std::shared_ptr<const LoadedModel>(std::move(loaded.value()));
    entry->state = "ready";
    if (kept) save_loads_locked(*entry->model);  // without what was dropped
  } else {
    entry->state = "failed";
    entry->error = scrub(entry->spec, loaded.status().message());
  }
}

Result<std::weak_ptr<const LoadedModel>> ModelRegistry::remove(const std::string& name) {
  MutexLock lock(mutex_);
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if ((*it)->spec.name == name) {
      std::weak_ptr<const LoadedModel> model = (*it)->model;
      entries_.erase(it);
      save_locked();
      if (Status forgotten = loads_.forget(name); !forgotten) {
        std::fprintf(stderr, "gpubox-modeld: %s (a restart loads model \"%s\"'s functions and SAEs again if it is loaded "
                     "again)\n", forgotten.message().c_str(), name.c_str());
      }
      return model;
    }
  }
  return Status(ErrorCode::not_found, fmt::format("no model \"{}\" (model.list shows the loaded ones)", name));
}

Result<std::shared_ptr<const LoadedModel>> ModelRegistry::ready(const std::string& name) {
  MutexLock lock(mutex_);
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    const auto& entry = *it;
    if (entry->spec.name != name) continue;
    if (entry->state == "ready") {
      std::string down = entry->model->decoder->failure();
      if (down.empty()) return entry->model;
      reload_locked(it);
      return Status(ErrorCode::unavailable, fmt::format("model \"{}\" is down: {}; it is loading again", name, down));
    }
    if (entry->state == "failed") {
      return Status(ErrorCode::unavailable, fmt::format("model \"{}\" failed to load: {}", name, entry->error));
    }
    return Status(ErrorCode::unavailable, fmt::format("model \"{}\" is loading ({} of {} bytes); try again shortly", name,
                                                      entry->progress.bytes_loaded.load(), entry->progress.bytes_total.load()));
  }
  std::vector<std::string> known;
  for (const auto& entry : entries_) known.push_back(entry->spec.name);
  return Status(ErrorCode::not_found, fmt::format("no model \"{}\"; models: {}", name,
                                                  known.empty() ? "none" : fmt::format("{}", fmt::join(known, ", "))));
}

nlohmann::json ModelRegistry::status() {
  MutexLock lock(mutex_);
  nlohmann::json models = nlohmann::json::array();
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if ((*it)->state == "ready" && !(*it)->model->decoder->failure().empty()) reload_locked(it);  // listed as loading
    const auto& entry = *it;
    nlohmann::json model = {{"name", entry->spec.name},
                            {"state", entry->state},
                            {"bytes_loaded", entry->progress.bytes_loaded.load()},
                            {"bytes_total", entry->progress.bytes_total.load()},
                            {"tensors_loaded", entry->progress.tensors_loaded.load()},
                            {"tensors_total", entry->progress.tensors_total.load()}};
    if (!entry->error.empty()) model["error"] = entry->error;
    models.push_back(std::move(model));
  }
  return {{"models", models}};
}

std::vector<std::string> ModelRegistry::names() const {
  MutexLock lock(mutex_);
  std::vector<std::string> out;
  for (const auto& entry : entries_) out.push_back(entry->spec.name);
  return out;
}

}  // namespace gpubox::modeld
