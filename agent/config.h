// The agent's configuration: one JSON document (docs/config.md), validated
// strictly before anything starts. Plain data; safe to copy between threads.
#pragma once

#include <chrono>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agent/log.h"
#include "agent/seccomp_filter.h"
#include "kernel/model_setup.h"
#include "base/status.h"

namespace gpubox {

enum class RestartPolicy { always, on_failure, never };
std::string_view restart_policy_name(RestartPolicy policy);

// One process the supervisor keeps running.
struct ChildSpec {
  std::string name;
  std::vector<std::string> argv;
  std::map<std::string, std::string> env;  // added to the agent's environment
  std::string cwd;                         // empty: the agent's cwd
  RestartPolicy restart = RestartPolicy::on_failure;
  std::chrono::milliseconds backoff_initial{100};
  std::chrono::milliseconds backoff_max{30'000};
  int max_restarts = 5;                     // more restarts than this within the window: failed
  std::chrono::milliseconds restart_window{60'000};
};

// The RPC endpoint set (rpc/PROTOCOL.md).
struct RpcConfig {
  // Default: one ipc:// socket, STATE_DIR/rpc.sock. An empty list disables RPC.
  std::vector<std::string> endpoints;
  bool endpoints_given = false;
  std::string secret_key;            // Z85; never logged. Or:
  std::string secret_key_file;       // a file holding it
  std::vector<std::string> authorized_keys;  // client public keys (Z85)
  std::string authorized_keys_file;  // one key per line; re-read when it changes
  int max_in_flight = 256;
  int max_workers = 64;
  int max_body_bytes = 1 << 20;
  int max_message_bytes = 64 << 20;
};

// The sandbox's lifetime (docs/architecture.md, "Lifecycle of a sandbox"). Every
// duration is measured on the agent's own monotonic clock from its start;
// zero turns the watchdog off.
struct LifecycleConfig {
  std::chrono::milliseconds timeout{0};         // the container deadline
  std::chrono::milliseconds idle_timeout{0};    // no RPC, job or cell for this long: shut down
  std::chrono::milliseconds harvest_margin{60'000};  // jobs are stopped and staged this long before the deadline
  std::chrono::milliseconds lease{0};           // no sys.heartbeat for this long: shut down
  std::string persistent_dir;                   // unacknowledged outputs are copied here before a watchdog shutdown
};

// Batch jobs (job.* methods): where they run, how many at once, how they stop
// and how their outputs are staged.
struct JobsConfig {
  std::string dir;                              // work dirs; empty: STATE_DIR/jobs
  std::string staging_dir;                      // staged archives; empty: STATE_DIR/staged
  int max_concurrent = 1;                       // running at once; the rest wait in FIFO order
  int max_queued = 1000;                        // waiting jobs beyond this: job.submit is refused
  std::chrono::milliseconds grace{10'000};      // between TERM and KILL of a job's process group
  long long max_input_bytes = 64LL << 30;       // all inputs of one job together
  int compression_level = 3;                    // zstd level of staged archives
  int compression_threads = 0;                  // zstd worker threads; 0: one per CPU, at most 8
};

// The Jupyter kernel the agent serves (kernel/, rpc/PROTOCOL.md "Kernel"): its
// sockets bind to 127.0.0.1 only; user code runs in a supervised Python executor.
struct KernelConfig {
  bool enabled = true;
  std::string python = "python3";               // the image's python3; found on PATH without a '/'
  std::string mode;                             // "" (IPython when importable) or "plain"
  std::vector<std::string> setup_code;          // the custom init code: run hidden at executor start and after every restart
  std::string workspace_dir;                    // put first on sys.path (created if missing); empty: none
  std::vector<kernel::PreloadedModel> models;        // preloaded at executor start and after every restart
  bool preload = false;                         // start the executor with the agent, not at first use
  std::chrono::milliseconds execute_timeout{0}; // default kernel.execute timeout for RPC callers; 0: none
  std::string connection_file;                  // empty: STATE_DIR/kernel.json (mode 0600)
};

// One model the native model host (gpubox-modeld) loads at each of its starts.
struct HostedModel {
  std::string name;              // unique; how model.* calls and sys.info name it
  std::string path;              // absolute: the Hugging Face directory
  std::string dtype;             // "float32", "bfloat16" or "float16"; default by device
  std::string device = "cpu";    // "cpu", "cuda", "cuda:N" or "cuda:N,M,..." (split across those GPUs, in rank order)
  std::optional<int> tensor_parallel;  // ranks, 1..64; none: the device list's length, else 1 (modeld's rank_devices)
  bool allow_cpu_split = false;  // tensor_parallel > 1 on "cpu" (tests, small machines); refused without it
  bool hidden = false;           // the path never shows in sys.info, logs or model.* errors
  bool cuda_graphs = false;      // decode steps replayed as a CUDA graph (on cuda; opt-in until a GPU run proves them)
  // The continuous-batching scheduler's limits (model/modeld/scheduler/batch_scheduler.h), passed to modeld as they are.
  int max_batch = 32;            // rows (prompts) decoded together in the running batch: 1..4096
  int max_queue = 256;           // requests waiting for admission (a full queue refuses with unavailable): 0..100000
  std::optional<int> kv_cache_mb;  // the preallocated KV cache pool, MiB (1..1048576); none: automatic
  // SAEs loaded with the model: [{name, path, hook?}] (paths absolute), passed to modeld as they are.
  nlohmann::json saes = nlohmann::json::array();
};

// The native model host (docs/config.md "model_host"): started only when the
// config has this section.
struct ModelHostConfig {
  bool enabled = false;          // the section is present
  std::string binary;            // absolute; empty: gpubox-modeld beside the agent's executable
  std::vector<HostedModel> models;
};

struct Config {
  std::string state_dir = "/run/gpubox";
  log::Level log_level = log::Level::info;
  bool log_stderr = true;
  bool log_file = true;
  std::chrono::milliseconds shutdown_grace{10'000};
  std::map<std::string, std::string> env;      // added to every child's environment
  std::map<std::string, std::string> secrets;  // like env; values are never logged
  std::vector<ChildSpec> children;
  RpcConfig rpc;
  LifecycleConfig lifecycle;
  JobsConfig jobs;
  KernelConfig kernel;
  ModelHostConfig model_host;
  SeccompSettings seccomp;  // the filter of every process the agent starts
};

// Parses and validates a whole config document. Errors name the key path and
// what is expected, e.g. "shutdown.grace_seconds: expected a number from 0 to 3600, got \"x\"".
Result<Config> parse_config(std::string_view json_text);

// GPUBOX_CONFIG holds the JSON text itself or its base64 encoding; returns the JSON text.
Result<std::string> decode_config_env(std::string_view value);

// The config as JSON in the schema's own shape, secret values redacted.
std::string config_to_json(const Config& config);

// model's entry of modeld.json (modeld's ModelLoadSpec keys) with path as modeld
// is to load it; config_to_json's model_host.models entries are these with model.path.
nlohmann::json hosted_model_entry(const HostedModel& model, const std::string& path);

}  // namespace gpubox
