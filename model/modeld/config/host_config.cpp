#include "model/modeld/config/host_config.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <optional>
#include <set>

#include "model/modeld/config/private_file.h"

namespace gpubox::modeld {

Result<SaeLoadSpec> parse_sae_load_spec(const nlohmann::json& entry, const std::string& where) {
  auto bad = [&](const std::string& what) { return Status(ErrorCode::invalid_request, fmt::format("{}: {}", where, what)); };
  if (!entry.is_object()) return bad("must be an object {name, path, hook?}");
  for (const auto& [key, value] : entry.items()) {
    if (key != "name" && key != "path" && key != "hook") return bad(fmt::format("unknown key \"{}\" (known: name, path, hook)", key));
  }
  SaeLoadSpec spec;
  if (!entry.contains("name") || !entry["name"].is_string() || entry["name"].get<std::string>().empty()) {
    return bad("\"name\" must be a non-empty string");
  }
  spec.name = entry["name"];
  if (!entry.contains("path") || !entry["path"].is_string() || entry["path"].get<std::string>().rfind('/', 0) != 0) {
    return bad("\"path\" must be an absolute path (a directory with cfg.json and sae_weights.safetensors)");
  }
  spec.path = entry["path"];
  if (entry.contains("hook")) {
    if (!entry["hook"].is_string() || entry["hook"].get<std::string>().empty()) return bad("\"hook\" must be a hook point's name");
    spec.hook = entry["hook"];
  }
  return spec;
}

nlohmann::json sae_load_spec_json(const SaeLoadSpec& spec) {
  nlohmann::json entry = {{"name", spec.name}, {"path", spec.path}};
  if (!spec.hook.empty()) entry["hook"] = spec.hook;
  return entry;
}

// value when it is an integer from min to max (a huge unsigned one is out of
// range, not wrapped); nullopt otherwise (a float such as 32.0 included).
static std::optional<std::int64_t> integer_in(const nlohmann::json& value, std::int64_t min, std::int64_t max) {
  if (!value.is_number_integer()) return std::nullopt;
  if (value.is_number_unsigned() && value.get<std::uint64_t>() > static_cast<std::uint64_t>(max)) return std::nullopt;
  auto number = value.get<std::int64_t>();
  if (number < min || number > max) return std::nullopt;
  return number;
}

// The most ranks one model is split into.
constexpr std::int64_t kMaxRanks = 64;

// A GPU index: 1 to 9 digits (no sign, no space); nullopt otherwise.
static std::optional<std::int64_t> gpu_index(const std::string& text) {
  if (text.empty() || text.size() > 9 || text.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  return std::stoll(text);
}

Result<std::vector<std::string>> rank_devices(const ModelLoadSpec& spec) {
  auto bad = [](const std::string& what) { return Status(ErrorCode::invalid_request, what); };
  const std::string& device = spec.device;
  if (spec.tensor_parallel && (*spec.tensor_parallel < 1 || *spec.tensor_parallel > kMaxRanks)) {
    return bad(fmt::format("\"tensor_parallel\" {} is not from 1 to {}", *spec.tensor_parallel, kMaxRanks));
  }
  std::vector<std::int64_t> listed;  // the GPUs of "cuda:N" or "cuda:N,M,..."
  if (device.rfind("cuda:", 0) == 0) {
    for (std::size_t start = 5;;) {
      std::size_t comma = std::min(device.find(',', start), device.size());
      auto index = gpu_index(device.substr(start, comma - start));
      if (!index) {  // an item that is not an index: no list
        listed.clear();
        break;
      }
      listed.push_back(*index);
      if (comma == device.size()) break;
      start = comma + 1;
    }
  }
  if (device != "cpu" && device != "cuda" && listed.empty()) {
    return bad(fmt::format("\"device\" \"{}\" is not cpu, cuda, cuda:N or cuda:N,M,... (GPU indices, no spaces)", device));
  }
  if (static_cast<std::int64_t>(listed.size()) > kMaxRanks) {
    return bad(fmt::format("\"device\" \"{}\" lists {} GPUs; at most {}", device, listed.size(), kMaxRanks));
  }
  std::set<std::int64_t> seen;
  for (auto index : listed) {
    if (!seen.insert(index).second) return bad(fmt::format("\"device\" \"{}\" lists cuda:{} twice", device, index));
  }
  bool is_list = listed.size() > 1;
  if (is_list && spec.tensor_parallel && *spec.tensor_parallel != static_cast<std::int64_t>(listed.size())) {
    return bad(fmt::format("\"tensor_parallel\" {} does not match \"device\" \"{}\", which lists {} GPUs",
                           *spec.tensor_parallel, device, listed.size()));
  }
  std::int64_t ranks = is_list ? static_cast<std::int64_t>(listed.size()) : spec.tensor_parallel.value_or(1);
  if (ranks == 1) return std::vector<std::string>{device};
  if (device == "cpu" && !spec.allow_cpu_split) {
    return bad(fmt::format("\"tensor_parallel\" {} on \"device\" \"cpu\" splits the model across CPU ranks, which is for "
                           "tests and small machines: set \"allow_cpu_split\": true to allow it",
                           ranks));
  }
  std::vector<std::string> devices;
  for (std::int64_t rank = 0; rank < ranks; ++rank) {
    if (device == "cpu") devices.push_back("cpu");
    else if (is_list) devices.push_back(fmt::format("cuda:{}", listed[rank]));
    else devices.push_back(fmt::format("cuda:{}", (listed.empty() ? 0 : listed[0]) + rank));
  }
  return devices;
}

Result<ModelLoadSpec> parse_model_load_spec(const nlohmann::json& entry, const std::string& where) {
  auto bad = [&](const std::string& what) { return Status(ErrorCode::invalid_request, fmt::format("{}: {}", where, what)); };
  if (!entry.is_object()) return bad("must be an object");
  static const std::set<std::string> known = {"name",      "path",      "dtype",       "device", "tensor_parallel", "allow_cpu_split",
                                              "hidden",    "cuda_graphs", "max_batch", "max_queue",     "kv_cache_mb", "saes"};
  for (const auto& [key, value] : entry.items()) {
    if (!known.count(key)) {
      return bad(fmt::format("unknown key \"{}\" (known: name, path, dtype, device, tensor_parallel, allow_cpu_split, hidden, "
                             "cuda_graphs, max_batch, max_queue, kv_cache_mb, saes)",
                             key));
    }
  }
  ModelLoadSpec spec;
  if (!entry.contains("name") || !entry["name"].is_string() || entry["name"].get<std::string>().empty()) {
    return bad("\"name\" must be a non-empty string");
  }
  spec.name = entry["name"];
  if (!entry.contains("path") || !entry["path"].is_string() || entry["path"].get<std::string>().rfind('/', 0) != 0) {
    return bad("\"path\" must be an absolute path");
  }
  spec.path = entry["path"];
  if (entry.contains("dtype")) {
    if (!entry["dtype"].is_string()) return bad("\"dtype\" must be float32, bfloat16 or float16");
    spec.dtype = entry["dtype"];
    if (spec.dtype != "float32" && spec.dtype != "bfloat16" && spec.dtype != "float16") {
      return bad(fmt::format("\"dtype\" \"{}\" is not one of float32, bfloat16, float16", spec.dtype));
    }
  }
  if (entry.contains("device")) {
    if (!entry["device"].is_string()) return bad("\"device\" must be cpu, cuda, cuda:N or cuda:N,M,...");
    spec.device = entry["device"];
  }
  if (entry.contains("tensor_parallel")) {
    auto number = integer_in(entry["tensor_parallel"], 1, kMaxRanks);
    if (!number) return bad(fmt::format("\"tensor_parallel\" must be an integer from 1 to {}", kMaxRanks));
    spec.tensor_parallel = *number;
  }
  if (entry.contains("allow_cpu_split")) {
    if (!entry["allow_cpu_split"].is_boolean()) return bad("\"allow_cpu_split\" must be true or false");
    spec.allow_cpu_split = entry["allow_cpu_split"];
  }
  if (auto ranks = rank_devices(spec); !ranks) return bad(ranks.status().message());
  if (entry.contains("hidden")) {
    if (!entry["hidden"].is_boolean()) return bad("\"hidden\" must be true or false");
    spec.hidden = entry["hidden"];
  }
  if (entry.contains("cuda_graphs")) {
    if (!entry["cuda_graphs"].is_boolean()) return bad("\"cuda_graphs\" must be true or false");
    spec.cuda_graphs = entry["cuda_graphs"];
  }
  // The batch scheduler's limits (batch_scheduler.h), in the agent's ranges (agent/config.cpp).
  auto out_of_range = [&](const char* key, std::int64_t min, std::int64_t max) {
    return bad(fmt::format("\"{}\" must be an integer from {} to {}", key, min, max));
  };
  if (entry.contains("max_batch")) {
    auto number = integer_in(entry["max_batch"], 1, 4096);
    if (!number) return out_of_range("max_batch", 1, 4096);
    spec.max_batch = *number;
  }
  if (entry.contains("max_queue")) {
    auto number = integer_in(entry["max_queue"], 0, 100'000);
    if (!number) return out_of_range("max_queue", 0, 100'000);
    spec.max_queue = *number;
  }
  if (entry.contains("kv_cache_mb")) {
    auto number = integer_in(entry["kv_cache_mb"], 1, 1'048'576);
    if (!number) return out_of_range("kv_cache_mb", 1, 1'048'576);
    spec.kv_cache_mb = *number;
  }
  if (entry.contains("saes")) {
    if (!entry["saes"].is_array()) return bad("\"saes\" must be a list of {name, path, hook?}");
    std::set<std::string> names;
    for (std::size_t i = 0; i < entry["saes"].size(); ++i) {
      auto sae = parse_sae_load_spec(entry["saes"][i], fmt::format("{}.saes[{}]", where, i));
      if (!sae) return sae.status();
      if (!names.insert(sae->name).second) return bad(fmt::format("saes[{}]: name \"{}\" is used twice", i, sae->name));
      spec.saes.push_back(std::move(*sae));
    }
  }
  if (spec.dtype.empty()) spec.dtype = spec.device == "cpu" ? "float32" : "bfloat16";
  return spec;
}

Result<std::vector<ModelLoadSpec>> read_host_config(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status(ErrorCode::not_found, path + ": cannot be read");
  nlohmann::json config = nlohmann::json::parse(in, nullptr, false);
  if (config.is_discarded() || !config.is_object()) return Status(ErrorCode::invalid_request, path + ": not a JSON object");
  std::vector<ModelLoadSpec> specs;
  std::set<std::string> names;
  const nlohmann::json models = config.value("models", nlohmann::json::array());
  if (!models.is_array()) return Status(ErrorCode::invalid_request, path + ": \"models\" must be an array");
  for (std::size_t i = 0; i < models.size(); ++i) {
    auto spec = parse_model_load_spec(models[i], fmt::format("{}: models[{}]", path, i));
    if (!spec) return spec.status();
    if (!names.insert(spec->name).second) {
      return Status(ErrorCode::invalid_request, fmt::format("{}: models[{}]: name \"{}\" is used twice", path, i, spec->name));
    }
    specs.push_back(std::move(*spec));
  }
  return specs;
}

Status write_host_config(const std::string& path, const std::vector<ModelLoadSpec>& specs) {
  nlohmann::json models = nlohmann::json::array();
  for (const auto& spec : specs) {
    nlohmann::json model = {{"name", spec.name}, {"path", spec.path}, {"dtype", spec.dtype}, {"device", spec.device},
                             {"hidden", spec.hidden}, {"cuda_graphs", spec.cuda_graphs}, {"max_batch", spec.max_batch},
                             {"max_queue", spec.max_queue}};
    if (spec.tensor_parallel) model["tensor_parallel"] = *spec.tensor_parallel;
    if (spec.allow_cpu_split) model["allow_cpu_split"] = true;
    if (spec.kv_cache_mb) model["kv_cache_mb"] = *spec.kv_cache_mb;
    if (!spec.saes.empty()) {
      model["saes"] = nlohmann::json::array();
      for (const auto& sae : spec.saes) model["saes"].push_back(sae_load_spec_json(sae));
    }
    models.push_back(std::move(model));
  }
  return write_private_file(path, nlohmann::json{{"models", std::move(models)}}.dump(2) + "\n");
}

}  // namespace gpubox::modeld
