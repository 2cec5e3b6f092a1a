// The model host's readers of files that come with a model: config.json and
// generation_config.json (parse_architecture), and a model entry (modeld.json,
// model.load's params). The input is one JSON document; it is given to every
// reader, as config, as generation config and as a model entry; a model entry
// that parses is split by rank_devices.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "model/modeld/decoder/architecture.h"
#include "model/modeld/config/host_config.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto json = nlohmann::json::parse(data, data + size, nullptr, false);
  if (json.is_discarded()) return 0;
  auto architecture = gpubox::modeld::parse_architecture(json, &json, "config.json");
  if (architecture) {
    // What the decoder relies on after a successful parse.
    if (architecture->layer_window.size() != static_cast<std::size_t>(architecture->num_layers)) __builtin_trap();
    if (architecture->num_heads % architecture->num_kv_heads != 0) __builtin_trap();
  }
  auto spec = gpubox::modeld::parse_model_load_spec(json, "models[0]");
  if (spec) {
    // A spec that parsed has its ranks (parse_model_load_spec refuses what rank_devices refuses): 1 to 64
    // devices, a split's all distinct GPUs or all "cpu".
    auto devices = gpubox::modeld::rank_devices(*spec);
    if (!devices || devices->empty() || devices->size() > 64) __builtin_trap();
    if (devices->size() > 1) {
      std::set<std::string> distinct(devices->begin(), devices->end());
      bool cpu = spec->device == "cpu";
      if (cpu != (distinct.size() == 1 && *distinct.begin() == "cpu")) __builtin_trap();
      if (!cpu && distinct.size() != devices->size()) __builtin_trap();
    }
  }
  return 0;
}
