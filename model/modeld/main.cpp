// gpubox-modeld --endpoint ipc://PATH --config FILE: loads the models FILE
// names and serves model.*, gpu.* and modeld.status on the endpoint until
// SIGTERM or SIGINT. Started and supervised by gpubox-agent.
// gpubox-modeld --torch-version: prints the LibTorch version it was built
// against (image/Dockerfile checks it against the image's torch).
// gpubox-modeld --profile-decode DIR [--device D] [--dtype T] [--steps N]
// [--prompt-tokens P]: loads the model in DIR and prints, as JSON, what one
// decode step costs (decode_profile.h; tests/device/decode_profile.py).
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>

#include "base/thread_annotations.h"
#include "model/modeld/scheduler/decode_profile.h"
#include "model/modeld/gpu/gpu_info.h"
#include "model/modeld/gpu/gpu_probe.h"
#include "model/modeld/config/host_config.h"
#include "model/modeld/methods/methods.h"
#include "model/modeld/registry/model_registry.h"
#include "rpc/server.h"
#include "torch/csrc/api/include/torch/version.h"  // macros only: TORCH_VERSION

namespace {

int usage(const char* why) {
  std::fprintf(stderr,
               "gpubox-modeld: %s\nusage: gpubox-modeld --endpoint ipc://PATH --config FILE | --torch-version\n"
               "       gpubox-modeld --profile-decode DIR [--device D] [--dtype T] [--steps N] [--prompt-tokens P]\n",
               why);
  return 2;
}

// --profile-decode DIR and its options (argv[2] on); the JSON goes to stdout.
int profile_decode_main(int argc, char** argv) {
  gpubox::modeld::ModelLoadSpec spec;
  spec.name = "profiled";
  spec.path = argv[2];
  gpubox::modeld::DecodeProfileOptions options;
  for (int i = 3; i < argc; i += 2) {
    std::string arg = argv[i];
    if (i + 1 >= argc) return usage((arg + " needs a value").c_str());
    std::string value = argv[i + 1];
    if (arg == "--device") {
      spec.device = value;
    } else if (arg == "--dtype") {
      spec.dtype = value;
    } else if (arg == "--steps" || arg == "--prompt-tokens") {
      char* end = nullptr;
      long long n = std::strtoll(value.c_str(), &end, 10);
      if (value.empty() || *end != '\0') return usage((arg + " takes a whole number, not " + value).c_str());
      (arg == "--steps" ? options.steps : options.prompt_tokens) = n;
    } else {
      return usage(("unknown argument " + arg).c_str());
    }
  }
  if (spec.dtype.empty()) spec.dtype = spec.device == "cpu" ? "float32" : "bfloat16";  // as modeld.json's default
  gpubox::modeld::LoadProgress progress;
  gpubox::modeld::KvBudget budget(std::make_shared<gpubox::modeld::NvmlDeviceMemory>());
  auto model = gpubox::modeld::load_model(spec, progress, gpubox::modeld::join_kv_budget(budget, spec));
  if (!model) {
    std::fprintf(stderr, "gpubox-modeld: %s\n", model.status().to_string().c_str());
    return 1;
  }
  auto profile = gpubox::modeld::profile_decode(*model.value()->decoder, *model.value()->scheduler, options);
  if (!profile) {
    std::fprintf(stderr, "gpubox-modeld: %s\n", profile.status().to_string().c_str());
    return 1;
  }
  std::printf("%s\n", profile->dump(1).c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string endpoint, config;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--torch-version" && argc == 2) {
      std::printf("%s\n", TORCH_VERSION);
      return 0;
    }
    if (arg == "--profile-decode" && i == 1) {
      if (argc < 3) return usage("--profile-decode needs a model directory");
      return profile_decode_main(argc, argv);
    }
    if ((arg == "--endpoint" || arg == "--config") && i + 1 < argc) {
      (arg == "--endpoint" ? endpoint : config) = argv[++i];
    } else {
      return usage(("unknown argument " + arg).c_str());
    }
  }
  if (endpoint.empty()) return usage("--endpoint is required");
  std::vector<gpubox::modeld::ModelLoadSpec> specs;
  if (!config.empty()) {
    auto read = gpubox::modeld::read_host_config(config);
    if (!read) return usage(read.status().message().c_str());
    specs = std::move(*read);
  }
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);  // every thread started below inherits the mask

  gpubox::modeld::ModelRegistry registry(config);
  gpubox::modeld::StartupProbe probe;
  gpubox::rpc::MethodRegistry methods;
  gpubox::modeld::add_modeld_methods(methods, registry, probe);
  // The models (and what callers had loaded into them) start loading before the first call is
  // served, so that no call finds them missing rather than loading.
  registry.start(specs);
  gpubox::rpc::ServerOptions options;
  options.endpoints = {endpoint};
  auto server = gpubox::rpc::Server::start(options, methods);
  if (!server) {
    std::fprintf(stderr, "gpubox-modeld: %s\n", server.status().to_string().c_str());
    std::_Exit(1);  // loads still running are abandoned, as at the end
  }
  std::fprintf(stderr, "gpubox-modeld: serving %s (%zu models loading)\n", endpoint.c_str(), specs.size());
  // On a GPU machine, measure the GPUs once (modeld.status shows it; gpu.probe measures again), once the
  // start's models have loaded: off their load path, not competing with it for PCIe and memory.
  std::thread([&probe, &registry] {
    if (gpubox::modeld::gpu_info()["gpus"].empty()) return;
    auto loading = [&registry] {
      for (const auto& model : registry.status()["models"]) {
        if (model["state"] == "loading") return true;
      }
      return false;
    };
    while (loading()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    auto measured = gpubox::modeld::gpu_probe();
    gpubox::MutexLock lock(probe.mutex);
    probe.result = measured ? measured.value() : nlohmann::json{{"error", measured.status().message()}};
  }).detach();
  int signal = 0;
  sigwait(&stop, &signal);
  std::fprintf(stderr, "gpubox-modeld: %s, stopping\n", strsignal(signal));
  server.value().reset();
  std::_Exit(0);  // loads still running are abandoned: nothing of theirs needs saving
}
