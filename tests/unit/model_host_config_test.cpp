// model_host (agent/config.h) parsed strictly with kernel.models' conventions,
// and prefix routes of rpc::MethodRegistry, which the model.* forwarder uses.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "agent/config.h"
#include "model/modeld/config/host_config.h"
#include "rpc/server.h"
#include "tests/unit/temp_dir.h"

namespace gpubox {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string error_of(const std::string& model_host) {
  auto config = parse_config(R"({"model_host": )" + model_host + "}");
  if (config.is_ok()) {
    ADD_FAILURE() << "accepted: " << model_host;
    return {};
  }
  EXPECT_EQ(config.status().code(), ErrorCode::invalid_request);
  return config.status().message();
}

TEST(ModelHostConfig, AbsentMeansOff) {
  auto config = parse_config("{}");
  ASSERT_TRUE(config.is_ok());
  EXPECT_FALSE(config->model_host.enabled);
}

TEST(ModelHostConfig, FieldsAndDefaults) {
  auto config = parse_config(R"({"model_host": {"binary": "/opt/modeld", "models": [
      {"name": "a", "path": "/models/a"},
      {"name": "b", "path": "/models/b", "device": "cuda:1"},
      {"name": "c", "path": "/models/c", "device": "cuda", "dtype": "float16", "hidden": true, "cuda_graphs": true}]}})");
  ASSERT_TRUE(config.is_ok()) << config.status().message();
  const ModelHostConfig& host = config->model_host;
  EXPECT_TRUE(host.enabled);
  EXPECT_EQ(host.binary, "/opt/modeld");
  ASSERT_EQ(host.models.size(), 3u);
  EXPECT_EQ(host.models[0].device, "cpu");
  EXPECT_EQ(host.models[0].dtype, "float32");
  EXPECT_EQ(host.models[1].dtype, "bfloat16");
  EXPECT_EQ(host.models[2].dtype, "float16");
  EXPECT_TRUE(host.models[2].hidden);
  EXPECT_FALSE(host.models[0].cuda_graphs);  // opt-in
  EXPECT_TRUE(host.models[2].cuda_graphs);
  EXPECT_THAT(config_to_json(*config), HasSubstr("\"model_host\""));
  EXPECT_THAT(config_to_json(*config), HasSubstr("\"cuda_graphs\": true"));
  EXPECT_EQ(host.models[0].max_batch, 32);
  EXPECT_EQ(host.models[0].max_queue, 256);
  EXPECT_FALSE(host.models[0].kv_cache_mb.has_value());  // automatic
}

TEST(ModelHostConfig, BatchLimitsAndTheirRanges) {
  auto config = parse_config(R"({"model_host": {"models": [
      {"name": "a", "path": "/models/a", "max_batch": 1, "max_queue": 0, "kv_cache_mb": 1},
      {"name": "b", "path": "/models/b", "max_batch": 4096, "max_queue": 100000, "kv_cache_mb": 1048576}]}})");
  ASSERT_TRUE(config.is_ok()) << config.status().message();
  const auto& models = config->model_host.models;
  EXPECT_EQ(models[0].max_batch, 1);
  EXPECT_EQ(models[0].max_queue, 0);
  EXPECT_EQ(models[0].kv_cache_mb, 1);
  EXPECT_EQ(models[1].max_batch, 4096);
  EXPECT_EQ(models[1].max_queue, 100000);
  EXPECT_EQ(models[1].kv_cache_mb, 1048576);
  std::string json = config_to_json(*config);
  EXPECT_THAT(json, HasSubstr("\"max_batch\": 4096"));
  EXPECT_THAT(json, HasSubstr("\"max_queue\": 100000"));
  EXPECT_THAT(json, HasSubstr("\"kv_cache_mb\": 1048576"));
  // Round trip: what config_to_json writes parses back the same.
  auto again = parse_config(json);
  ASSERT_TRUE(again.is_ok()) << again.status().message();
  EXPECT_EQ(again->model_host.models[1].kv_cache_mb, 1048576);
  auto automatic = parse_config(R"({"model_host": {"models": [{"name": "a", "path": "/models/a"}]}})");
  ASSERT_TRUE(automatic.is_ok());
  EXPECT_THAT(config_to_json(*automatic), Not(HasSubstr("kv_cache_mb")));  // absent: automatic

  auto model = [](const std::string& key, const std::string& value) {
    return R"({"models": [{"name": "m", "path": "/m", ")" + key + "\": " + value + "}]}";
  };
  for (const char* value : {"0", "4097", "-1", "32.5", "\"32\"", "true", "18446744073709551615"}) {
    EXPECT_THAT(error_of(model("max_batch", value)),
                HasSubstr("model_host.models[0].max_batch: expected an integer from 1 to 4096"))
        << value;
  }
  for (const char* value : {"-1", "100001", "null"}) {
    EXPECT_THAT(error_of(model("max_queue", value)),
                HasSubstr("model_host.models[0].max_queue: expected an integer from 0 to 100000"))
        << value;
  }
  for (const char* value : {"0", "1048577", "null", "\"auto\""}) {
    EXPECT_THAT(error_of(model("kv_cache_mb", value)),
                HasSubstr("model_host.models[0].kv_cache_mb: expected an integer from 1 to 1048576"))
        << value;
  }
}

TEST(ModelHostConfig, EmptySectionIsAHostWithoutModels) {
  auto config = parse_config(R"({"model_host": {}})");
  ASSERT_TRUE(config.is_ok());
  EXPECT_TRUE(config->model_host.enabled);
  EXPECT_TRUE(config->model_host.models.empty());
}

TEST(ModelHostConfig, ErrorsNameTheField) {
  EXPECT_THAT(error_of(R"({"modles": []})"), HasSubstr("model_host.modles: unknown key"));
  EXPECT_THAT(error_of(R"([])"), HasSubstr("model_host: expected an object"));
  EXPECT_THAT(error_of(R"({"binary": "modeld"})"), HasSubstr("model_host.binary: expected an absolute path"));
  EXPECT_THAT(error_of(R"({"models": {}})"), HasSubstr("model_host.models: expected an array"));
  EXPECT_THAT(error_of(R"({"models": [{"path": "/m"}]})"), HasSubstr("model_host.models[0].name: required"));
  EXPECT_THAT(error_of(R"({"models": [{"name": "m"}]})"), HasSubstr("model_host.models[0].path: required"));
  EXPECT_THAT(error_of(R"({"models": [{"name": "m", "path": "m"}]})"),
              HasSubstr("model_host.models[0].path: expected an absolute path"));
  EXPECT_THAT(error_of(R"({"models": [{"name": "m", "path": "/m", "dtype": "float64"}]})"),
              HasSubstr("model_host.models[0].dtype: expected \"float32\", \"bfloat16\" or \"float16\""));
  EXPECT_THAT(error_of(R"({"models": [{"name": "m", "path": "/m", "device": "gpu"}]})"),
              HasSubstr("model_host.models[0].device: expected"));
  EXPECT_THAT(error_of(R"({"models": [{"name": "m", "path": "/m", "hidden": 1}]})"),
              HasSubstr("model_host.models[0].hidden: expected true or false"));
  EXPECT_THAT(error_of(R"({"models": [{"name": "m", "path": "/m", "cuda_graphs": "yes"}]})"),
              HasSubstr("model_host.models[0].cuda_graphs: expected true or false"));
  EXPECT_THAT(error_of(R"({"models": [{"name": "m", "path": "/m", "loader": "transformers"}]})"),
              HasSubstr("model_host.models[0].loader: unknown key"));
  EXPECT_THAT(error_of(R"({"models": [{"name": "m", "path": "/a"}, {"name": "m", "path": "/b"}]})"),
              HasSubstr("model_host.models[1].name: expected a name no other model has"));
}

TEST(ModelHostConfig, SaesPassToModeldAndAreChecked) {
  auto config = parse_config(R"({"model_host": {"models": [{"name": "m", "path": "/m",
      "saes": [{"name": "res1", "path": "/saes/res1", "hook": "blocks.1.hook_resid_post"}, {"name": "r2", "path": "/saes/r2"}]}]}})");
  ASSERT_TRUE(config.is_ok()) << config.status().message();
  const auto& saes = config->model_host.models[0].saes;
  ASSERT_EQ(saes.size(), 2u);
  EXPECT_EQ(saes[0]["hook"], "blocks.1.hook_resid_post");
  EXPECT_FALSE(saes[1].contains("hook"));
  EXPECT_THAT(config_to_json(*config), HasSubstr("/saes/res1"));
  EXPECT_THAT(error_of(R"({"models": [{"name": "m", "path": "/m", "saes": {}}]})"), HasSubstr("model_host.models[0].saes: expected an array"));
  EXPECT_THAT(error_of(R"({"models": [{"name": "m", "path": "/m", "saes": [{"name": "s", "path": "rel"}]}]})"),
              HasSubstr("model_host.models[0].saes[0].path: expected an absolute path"));
  EXPECT_THAT(error_of(R"({"models": [{"name": "m", "path": "/m", "saes": [{"name": "s", "path": "/a", "width": 3}]}]})"),
              HasSubstr("model_host.models[0].saes[0].width: unknown key"));
  EXPECT_THAT(error_of(R"({"models": [{"name": "m", "path": "/m", "saes": [{"name": "s", "path": "/a"}, {"name": "s", "path": "/b"}]}]})"),
              HasSubstr("model_host.models[0].saes[1].name: expected a name no other SAE"));

  // modeld's side (modeld.json, model.load): the same entries, written back as read.
  auto spec = modeld::parse_model_load_spec(nlohmann::json::parse(R"({"name": "m", "path": "/m",
      "saes": [{"name": "res1", "path": "/saes/res1", "hook": "blocks.1.hook_resid_post"}]})"), "models[0]");
  ASSERT_TRUE(spec.is_ok()) << spec.status().message();
  ASSERT_EQ(spec->saes.size(), 1u);
  EXPECT_EQ(spec->saes[0].hook, "blocks.1.hook_resid_post");
  auto bad = modeld::parse_model_load_spec(nlohmann::json::parse(R"({"name": "m", "path": "/m", "saes": [{"name": "", "path": "/a"}]})"),
                                           "models[0]");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("models[0].saes[0]: \"name\" must be a non-empty string"));
}

// modeld's side (modeld.json, model.load's params): the same keys, ranges and
// defaults; write_host_config writes max_batch and max_queue always and
// kv_cache_mb only when set, and read_host_config reads them back as they were.
TEST(ModelLoadSpec, BatchLimitsParseWriteAndReadBack) {
  auto parse = [](const std::string& text) { return modeld::parse_model_load_spec(nlohmann::json::parse(text), "models[0]"); };
  auto defaults = parse(R"({"name": "d", "path": "/d"})");
  ASSERT_TRUE(defaults.is_ok()) << defaults.status().message();
  EXPECT_EQ(defaults->max_batch, 32);
  EXPECT_EQ(defaults->max_queue, 256);
  EXPECT_FALSE(defaults->kv_cache_mb.has_value());
  auto set = parse(R"({"name": "s", "path": "/s", "max_batch": 4096, "max_queue": 0, "kv_cache_mb": 1048576})");
  ASSERT_TRUE(set.is_ok()) << set.status().message();
  EXPECT_EQ(set->max_batch, 4096);
  EXPECT_EQ(set->max_queue, 0);
  EXPECT_EQ(set->kv_cache_mb, 1048576);

  auto error = [&](const std::string& key, const std::string& value) {
    auto spec = parse(R"({"name": "m", "path": "/m", ")" + key + "\": " + value + "}");
    if (spec.is_ok()) {
      ADD_FAILURE() << "accepted: " << key << " = " << value;
      return std::string();
    }
    EXPECT_EQ(spec.status().code(), ErrorCode::invalid_request);
    return spec.status().message();
  };
  for (const char* value : {"0", "4097", "-5", "8.0", "\"8\"", "null", "18446744073709551615"}) {
    EXPECT_THAT(error("max_batch", value), HasSubstr("models[0]: \"max_batch\" must be an integer from 1 to 4096")) << value;
  }
  for (const char* value : {"-1", "100001", "false"}) {
    EXPECT_THAT(error("max_queue", value), HasSubstr("models[0]: \"max_queue\" must be an integer from 0 to 100000")) << value;
  }
  for (const char* value : {"0", "1048577", "\"auto\"", "-9223372036854775808"}) {
    EXPECT_THAT(error("kv_cache_mb", value), HasSubstr("models[0]: \"kv_cache_mb\" must be an integer from 1 to 1048576")) << value;
  }
  EXPECT_THAT(error("max_batches", "8"), HasSubstr("max_batch, max_queue, kv_cache_mb"));  // the known keys listed

  test::TempDir dir;
  std::string path = dir.file("modeld.json");
  ASSERT_TRUE(modeld::write_host_config(path, {*defaults, *set}).is_ok());
  auto written = nlohmann::json::parse(test::TempDir::read(path));
  EXPECT_EQ(written["models"][0]["max_batch"], 32);
  EXPECT_EQ(written["models"][0]["max_queue"], 256);
  EXPECT_FALSE(written["models"][0].contains("kv_cache_mb"));  // automatic: not written
  EXPECT_EQ(written["models"][1]["kv_cache_mb"], 1048576);
  auto read = modeld::read_host_config(path);
  ASSERT_TRUE(read.is_ok()) << read.status().message();
  ASSERT_EQ(read->size(), 2u);
  EXPECT_EQ((*read)[0].max_batch, 32);
  EXPECT_EQ((*read)[0].max_queue, 256);
  EXPECT_FALSE((*read)[0].kv_cache_mb.has_value());
  EXPECT_EQ((*read)[1].max_batch, 4096);
  EXPECT_EQ((*read)[1].max_queue, 0);
  EXPECT_EQ((*read)[1].kv_cache_mb, 1048576);

  // What the agent writes into modeld.json (config_to_json's entry, as the
  // supervisor writes it) is what modeld accepts.
  auto config = parse_config(R"({"model_host": {"models": [{"name": "a", "path": "/a", "max_batch": 7, "kv_cache_mb": 512}]}})");
  ASSERT_TRUE(config.is_ok()) << config.status().message();
  auto entry = nlohmann::json::parse(config_to_json(*config))["model_host"]["models"][0];
  auto spec = modeld::parse_model_load_spec(entry, "models[0]");
  ASSERT_TRUE(spec.is_ok()) << spec.status().message();
  EXPECT_EQ(spec->max_batch, 7);
  EXPECT_EQ(spec->max_queue, 256);
  EXPECT_EQ(spec->kv_cache_mb, 512);
}

// rank_devices of a spec with these three fields.
Result<std::vector<std::string>> rank_devices_of(const std::string& device, std::optional<std::int64_t> tensor_parallel,
                                                 bool allow_cpu_split) {
  modeld::ModelLoadSpec spec;
  spec.device = device;
  spec.tensor_parallel = tensor_parallel;
  spec.allow_cpu_split = allow_cpu_split;
  return modeld::rank_devices(spec);
}

// rank_devices: one device per rank for each form of device and tensor_parallel.
TEST(ModelLoadSpec, RankDevicesForEachForm) {
  auto ranks = [](const std::string& device, std::optional<std::int64_t> tensor_parallel, bool allow_cpu_split = false) {
    auto devices = rank_devices_of(device, tensor_parallel, allow_cpu_split);
    EXPECT_TRUE(devices.is_ok()) << device << ": " << devices.status().message();
    return devices.is_ok() ? *devices : std::vector<std::string>{};
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(ranks("cpu", std::nullopt), V({"cpu"}));
  EXPECT_EQ(ranks("cuda", std::nullopt), V({"cuda"}));  // one rank: the device as given
  EXPECT_EQ(ranks("cuda:3", 1), V({"cuda:3"}));
  EXPECT_EQ(ranks("cuda", 2), V({"cuda:0", "cuda:1"}));
  EXPECT_EQ(ranks("cuda:2", 3), V({"cuda:2", "cuda:3", "cuda:4"}));
  EXPECT_EQ(ranks("cuda:0,1", std::nullopt), V({"cuda:0", "cuda:1"}));  // taken from the list
  EXPECT_EQ(ranks("cuda:3,1,2", 3), V({"cuda:3", "cuda:1", "cuda:2"}));  // rank order is the list's
  EXPECT_EQ(ranks("cpu", 2, true), V({"cpu", "cpu"}));
  EXPECT_EQ(ranks("cuda", 64).size(), 64u);
  EXPECT_EQ(ranks("cuda", 64).back(), "cuda:63");
}

TEST(ModelLoadSpec, RankDevicesRefusalsNameTheValue) {
  auto error = [](const std::string& device, std::optional<std::int64_t> tensor_parallel, bool allow_cpu_split = false) {
    auto devices = rank_devices_of(device, tensor_parallel, allow_cpu_split);
    if (devices.is_ok()) {
      ADD_FAILURE() << "accepted: " << device;
      return std::string();
    }
    EXPECT_EQ(devices.status().code(), ErrorCode::invalid_request);
    return devices.status().message();
  };
  EXPECT_THAT(error("cuda:0,0", std::nullopt), HasSubstr("\"device\" \"cuda:0,0\" lists cuda:0 twice"));
  EXPECT_THAT(error("cuda:1,2,01", std::nullopt), HasSubstr("lists cuda:1 twice"));
  for (const char* device : {"cuda:0,", "cuda:,1", "cuda:0,,1", "cuda:0, 1", "cuda:a", "cuda:-1", "cuda:", "gpu", "cpu:0",
                             "cuda:0;1", "cuda:1234567890", "cpu,cpu", ""}) {
    EXPECT_THAT(error(device, std::nullopt), HasSubstr(std::string("\"device\" \"") + device + "\" is not cpu, cuda, cuda:N or cuda:N,M"))
        << device;
  }
  EXPECT_THAT(error("cuda:0,1", 3), HasSubstr("\"tensor_parallel\" 3 does not match \"device\" \"cuda:0,1\", which lists 2 GPUs"));
  EXPECT_THAT(error("cuda:0,1,2", 1), HasSubstr("\"tensor_parallel\" 1 does not match"));
  EXPECT_THAT(error("cuda", 0), HasSubstr("\"tensor_parallel\" 0 is not from 1 to 64"));
  EXPECT_THAT(error("cuda", 65), HasSubstr("\"tensor_parallel\" 65 is not from 1 to 64"));
  std::string cpu = error("cpu", 2);
  EXPECT_THAT(cpu, HasSubstr("\"tensor_parallel\" 2 on \"device\" \"cpu\""));
  EXPECT_THAT(cpu, HasSubstr("tests and small machines"));
  EXPECT_THAT(cpu, HasSubstr("\"allow_cpu_split\": true"));
  std::string many = "cuda:0";
  for (int gpu = 1; gpu <= 64; ++gpu) many += "," + std::to_string(gpu);
  EXPECT_THAT(error(many, std::nullopt), HasSubstr("lists 65 GPUs; at most 64"));
}

// parse_model_load_spec (modeld.json, model.load) reads the split's keys and refuses
// what rank_devices refuses, naming the entry; write_host_config writes them back.
TEST(ModelLoadSpec, SplitKeysParseWriteAndReadBack) {
  auto parse = [](const std::string& text) { return modeld::parse_model_load_spec(nlohmann::json::parse(text), "models[0]"); };
  auto plain = parse(R"({"name": "p", "path": "/p", "device": "cuda"})");
  ASSERT_TRUE(plain.is_ok()) << plain.status().message();
  EXPECT_FALSE(plain->tensor_parallel.has_value());
  EXPECT_FALSE(plain->allow_cpu_split);
  auto listed = parse(R"({"name": "l", "path": "/l", "device": "cuda:2,3"})");
  ASSERT_TRUE(listed.is_ok()) << listed.status().message();
  EXPECT_EQ(listed->dtype, "bfloat16");  // a GPU's default
  auto counted = parse(R"({"name": "c", "path": "/c", "device": "cuda:1", "tensor_parallel": 4})");
  ASSERT_TRUE(counted.is_ok()) << counted.status().message();
  EXPECT_EQ(counted->tensor_parallel, 4);
  auto cpu = parse(R"({"name": "u", "path": "/u", "tensor_parallel": 2, "allow_cpu_split": true})");
  ASSERT_TRUE(cpu.is_ok()) << cpu.status().message();
  EXPECT_EQ(cpu->tensor_parallel, 2);
  EXPECT_TRUE(cpu->allow_cpu_split);
  EXPECT_EQ(cpu->dtype, "float32");

  auto error = [&](const std::string& extra) {
    auto spec = parse(R"({"name": "m", "path": "/m", )" + extra + "}");
    if (spec.is_ok()) {
      ADD_FAILURE() << "accepted: " << extra;
      return std::string();
    }
    EXPECT_EQ(spec.status().code(), ErrorCode::invalid_request);
    return spec.status().message();
  };
  for (const char* value : {"0", "65", "-1", "2.0", "\"2\"", "true", "null", "18446744073709551615"}) {
    EXPECT_THAT(error(std::string(R"("device": "cuda", "tensor_parallel": )") + value),
                HasSubstr("models[0]: \"tensor_parallel\" must be an integer from 1 to 64"))
        << value;
  }
  EXPECT_THAT(error(R"("allow_cpu_split": 1)"), HasSubstr("models[0]: \"allow_cpu_split\" must be true or false"));
  EXPECT_THAT(error(R"("device": 0)"), HasSubstr("models[0]: \"device\" must be cpu, cuda, cuda:N or cuda:N,M,..."));
  EXPECT_THAT(error(R"("device": "cuda:0,0")"), HasSubstr("models[0]: \"device\" \"cuda:0,0\" lists cuda:0 twice"));
  EXPECT_THAT(error(R"("device": "cuda:0,x")"), HasSubstr("models[0]: \"device\" \"cuda:0,x\" is not cpu, cuda"));
  EXPECT_THAT(error(R"("device": "cuda:0,1", "tensor_parallel": 3)"),
              HasSubstr("models[0]: \"tensor_parallel\" 3 does not match \"device\" \"cuda:0,1\", which lists 2 GPUs"));
  EXPECT_THAT(error(R"("tensor_parallel": 2)"), HasSubstr("models[0]: \"tensor_parallel\" 2 on \"device\" \"cpu\""));
  EXPECT_THAT(error(R"("tensor_parallel": 2, "allow_cpu_split": false)"), HasSubstr("\"allow_cpu_split\": true"));
  std::string unknown = error(R"("tensor_paralel": 2)");
  EXPECT_THAT(unknown, HasSubstr("unknown key \"tensor_paralel\""));
  EXPECT_THAT(unknown, HasSubstr("device, tensor_parallel, allow_cpu_split, hidden"));

  test::TempDir dir;
  std::string path = dir.file("modeld.json");
  ASSERT_TRUE(modeld::write_host_config(path, {*plain, *listed, *counted, *cpu}).is_ok());
  auto written = nlohmann::json::parse(test::TempDir::read(path));
  EXPECT_FALSE(written["models"][0].contains("tensor_parallel"));  // absent: not written
  EXPECT_FALSE(written["models"][0].contains("allow_cpu_split"));
  EXPECT_EQ(written["models"][1]["device"], "cuda:2,3");
  EXPECT_EQ(written["models"][2]["tensor_parallel"], 4);
  EXPECT_EQ(written["models"][3]["allow_cpu_split"], true);
  auto read = modeld::read_host_config(path);
  ASSERT_TRUE(read.is_ok()) << read.status().message();
  ASSERT_EQ(read->size(), 4u);
  const auto& specs = *read;
  EXPECT_EQ(specs[0].device, "cuda");
  EXPECT_FALSE(specs[0].tensor_parallel.has_value());
  EXPECT_EQ(specs[1].device, "cuda:2,3");
  EXPECT_FALSE(specs[1].tensor_parallel.has_value());
  EXPECT_EQ(specs[2].device, "cuda:1");
  EXPECT_EQ(specs[2].tensor_parallel, 4);
  EXPECT_FALSE(specs[2].allow_cpu_split);
  EXPECT_EQ(specs[3].tensor_parallel, 2);
  EXPECT_TRUE(specs[3].allow_cpu_split);
  using V = std::vector<std::string>;
  EXPECT_EQ(modeld::rank_devices(specs[1]).value(), V({"cuda:2", "cuda:3"}));
  EXPECT_EQ(modeld::rank_devices(specs[2]).value(), V({"cuda:1", "cuda:2", "cuda:3", "cuda:4"}));
  EXPECT_EQ(modeld::rank_devices(specs[3]).value(), V({"cpu", "cpu"}));
}

// The agent's model_host.models take the same split keys and grammar, refuse what
// modeld refuses, and pass them into modeld.json's entry (hosted_model_entry).
TEST(ModelHostConfig, SplitKeysAreCheckedAndReachModeld) {
  auto config = parse_config(R"({"model_host": {"models": [
      {"name": "a", "path": "/a", "device": "cuda:0,1"},
      {"name": "b", "path": "/b", "device": "cuda:2", "tensor_parallel": 2},
      {"name": "c", "path": "/c", "tensor_parallel": 2, "allow_cpu_split": true},
      {"name": "d", "path": "/d", "device": "cuda"}]}})");
  ASSERT_TRUE(config.is_ok()) << config.status().message();
  const auto& models = config->model_host.models;
  EXPECT_EQ(models[0].device, "cuda:0,1");
  EXPECT_EQ(models[0].dtype, "bfloat16");
  EXPECT_FALSE(models[0].tensor_parallel.has_value());
  EXPECT_EQ(models[1].tensor_parallel, 2);
  EXPECT_TRUE(models[2].allow_cpu_split);
  EXPECT_FALSE(models[3].tensor_parallel.has_value());
  EXPECT_FALSE(models[3].allow_cpu_split);

  auto entry = hosted_model_entry(models[1], "/placed/b");
  EXPECT_EQ(entry["path"], "/placed/b");
  EXPECT_EQ(entry["tensor_parallel"], 2);
  EXPECT_FALSE(entry.contains("allow_cpu_split"));
  EXPECT_FALSE(hosted_model_entry(models[3], "/d").contains("tensor_parallel"));
  auto document = nlohmann::json::parse(config_to_json(*config));
  using V = std::vector<std::string>;
  std::vector<V> expected = {{"cuda:0", "cuda:1"}, {"cuda:2", "cuda:3"}, {"cpu", "cpu"}, {"cuda"}};
  for (std::size_t i = 0; i < models.size(); ++i) {
    auto spec = modeld::parse_model_load_spec(document["model_host"]["models"][i], "models[0]");
    ASSERT_TRUE(spec.is_ok()) << spec.status().message();
    EXPECT_EQ(modeld::rank_devices(*spec).value(), expected[i]) << i;
  }
  auto again = parse_config(config_to_json(*config));  // config_to_json's output parses back
  ASSERT_TRUE(again.is_ok()) << again.status().message();
  EXPECT_TRUE(again->model_host.models[2].allow_cpu_split);

  auto model = [](const std::string& extra) { return R"({"models": [{"name": "m", "path": "/m", )" + extra + "}]}"; };
  EXPECT_THAT(error_of(model(R"("device": "cuda:0,0")")),
              HasSubstr("model_host.models[0].device: expected each GPU listed once (cuda:0 is twice), got \"cuda:0,0\""));
  for (const char* device : {"cuda:0,", "cuda:0, 1", "cuda:,1", "cuda:0;1", "cpu,cpu"}) {
    EXPECT_THAT(error_of(model(std::string(R"("device": ")") + device + "\"")),
                HasSubstr("model_host.models[0].device: expected \"cpu\", \"cuda\", \"cuda:N\" or a list of up to 64 GPUs"))
        << device;
  }
  for (const char* value : {"0", "65", "2.5", "\"2\""}) {
    EXPECT_THAT(error_of(model(std::string(R"("device": "cuda", "tensor_parallel": )") + value)),
                HasSubstr("model_host.models[0].tensor_parallel: expected an integer from 1 to 64"))
        << value;
  }
  EXPECT_THAT(error_of(model(R"("allow_cpu_split": "yes")")), HasSubstr("model_host.models[0].allow_cpu_split: expected true or false"));
  EXPECT_THAT(error_of(model(R"("device": "cuda:0,1", "tensor_parallel": 3)")),
              HasSubstr("model_host.models[0].tensor_parallel: 3 does not match device \"cuda:0,1\", which lists 2 GPUs"));
  std::string cpu = error_of(model(R"("tensor_parallel": 2)"));
  EXPECT_THAT(cpu, HasSubstr("model_host.models[0].tensor_parallel: 2 ranks on device \"cpu\""));
  EXPECT_THAT(cpu, HasSubstr("allow_cpu_split: true"));

  // The kernel loads a model on one device: the split's keys and a list are refused there, saying so.
  auto kernel = [](const std::string& extra) {
    auto parsed = parse_config(R"({"kernel": {"models": [{"name": "k", "path": "/k", "loader": "transformers", )" + extra + "}]}}");
    return parsed.is_ok() ? std::string("accepted") : parsed.status().message();
  };
  EXPECT_THAT(kernel(R"("device": "cuda:0,1")"),
              HasSubstr("kernel.models[0].device: a list of GPUs (\"cuda:0,1\") splits a model only in model_host.models"));
  EXPECT_THAT(kernel(R"("tensor_parallel": 2)"), HasSubstr("kernel.models[0].tensor_parallel: only in model_host.models"));
  EXPECT_THAT(kernel(R"("allow_cpu_split": true)"), HasSubstr("kernel.models[0].allow_cpu_split: only in model_host.models"));
}

rpc::Handler answering(std::string text) {
  return [text](rpc::CallContext&) -> Result<nlohmann::json> { return nlohmann::json(text); };
}

TEST(MethodRegistryPrefix, ExactNamesFirstThenTheLongestPrefix) {
  rpc::MethodRegistry methods;
  methods.add("model.special", answering("exact"));
  methods.add_prefix("model.", answering("model"));
  methods.add_prefix("model.x.", answering("model.x"));
  methods.add_prefix("gpu.", answering("gpu"));
  auto run = [&](const std::string& name) -> std::string {
    const auto* method = methods.find(name);
    if (!method) return "none";
    auto state = std::make_shared<rpc::CallState>(1, name, std::nullopt, 16);
    rpc::CallContext call(state, nlohmann::json::object(), {}, "local", [](rpc::Outgoing&&) {});
    return method->handler(call)->get<std::string>();
  };
  EXPECT_EQ(run("model.special"), "exact");
  EXPECT_EQ(run("model.generate"), "model");
  EXPECT_EQ(run("model.x.y"), "model.x");
  EXPECT_EQ(run("gpu.info"), "gpu");
  EXPECT_EQ(run("model."), "none");  // a prefix alone is no method
  EXPECT_EQ(run("models.list"), "none");
  EXPECT_EQ(run("sys.ping"), "none");
  auto names = methods.names();
  EXPECT_NE(std::find(names.begin(), names.end(), "model.*"), names.end());
}

}  // namespace
}  // namespace gpubox
