// HostConfig: modeld.json, the models the agent asks modeld to load at start
// ({"models": [{name, path, dtype, device, tensor_parallel?, allow_cpu_split?, hidden, saes?: [{name, path, hook?}]}]});
// the same entry shape is model.load's params.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"

namespace gpubox::modeld {

// One SAE to load with a model, or model.sae_load's params (without "model").
struct SaeLoadSpec {
  std::string name;
  std::string path;  // a directory in SAELens' format: cfg.json, sae_weights.safetensors
  std::string hook;  // "" = cfg.json's hook_name
};

// One SAE entry; where names it in errors ("models[0].saes[1]").
Result<SaeLoadSpec> parse_sae_load_spec(const nlohmann::json& entry, const std::string& where);
// {name, path, hook?}: what parse_sae_load_spec reads back as spec.
nlohmann::json sae_load_spec_json(const SaeLoadSpec& spec);

// One model to load: an entry of modeld.json, or model.load's params.
struct ModelLoadSpec {
  std::string name;
  std::string path;           // a Hugging Face model directory
  std::string dtype;          // "float32", "bfloat16", "float16"; "" = float32 on cpu, bfloat16 on cuda
  std::string device = "cpu"; // "cpu", "cuda", "cuda:N", or "cuda:N,M,..." (split across those GPUs, in rank order)
  std::optional<std::int64_t> tensor_parallel;  // ranks, 1..64; none: the device list's length, else 1 (rank_devices)
  bool allow_cpu_split = false;  // tensor_parallel > 1 on "cpu" (tests, small machines); refused without it
  bool hidden = false;        // the path appears in no reply, log or error
  bool cuda_graphs = false;   // decode steps without hooks replayed as a CUDA graph (cuda only; else eager, logged)
  std::int64_t max_batch = 32;            // rows decoded together in the running batch (the scheduler's limit)
  std::int64_t max_queue = 256;           // requests waiting for admission; a full queue is refused (unavailable)
  std::optional<std::int64_t> kv_cache_mb;  // the KV cache pool's size; none: automatic (batch_scheduler.h)
  std::vector<SaeLoadSpec> saes;  // loaded with the model, before it is ready
};

// One device per rank, in rank order: a single rank keeps device as given;
// "cuda" with N ranks is cuda:0..cuda:N-1, "cuda:K" is cuda:K..cuda:K+N-1, a
// list is its GPUs, "cpu" is N times "cpu". invalid_request naming the value
// for a bad device, a GPU listed twice, tensor_parallel outside 1..64 or other
// than the list's length, or a CPU split without allow_cpu_split.
Result<std::vector<std::string>> rank_devices(const ModelLoadSpec& spec);

// One entry; where names the entry in errors ("models[2]"). A device and
// tensor_parallel that rank_devices refuses are refused here.
Result<ModelLoadSpec> parse_model_load_spec(const nlohmann::json& entry, const std::string& where);
Result<std::vector<ModelLoadSpec>> read_host_config(const std::string& path);
// Replaces the file at path (written beside it, then renamed; mode 0600) with
// {"models": [...]} of specs, which read_host_config reads back as they are.
Status write_host_config(const std::string& path, const std::vector<ModelLoadSpec>& specs);

}  // namespace gpubox::modeld
