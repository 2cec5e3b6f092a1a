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
