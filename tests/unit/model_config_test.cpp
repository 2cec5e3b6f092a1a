// kernel.models and kernel.workspace_dir (agent/config.h) parsed strictly, and
// the setup code and pending report built from them (kernel/model_setup.h):
// a hidden model's name and configured path never reach the executor.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "agent/config.h"
#include "agent/model_mounts.h"
#include "kernel/model_setup.h"

namespace gpubox {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string error_of(const std::string& kernel) {
  auto config = parse_config(R"({"kernel": )" + kernel + "}");
  if (config.is_ok()) {
    ADD_FAILURE() << "accepted: " << kernel;
    return {};
  }
  return config.status().message();
}

std::string with_model(const std::string& extra) {
  return R"({"models": [{"name": "m", "path": "/models/m", "loader": "transformers")" + extra + "}]}";
}

TEST(ModelConfig, DefaultsAndEveryField) {
  auto config = parse_config(R"({"kernel": {"workspace_dir": "/workspace", "models": [
      {"name": "tiny", "path": "/models/tiny.pt", "loader": "torchscript"},
      {"name": "llama-adapter", "path": "/models/adapter", "loader": "transformers", "var_name": "llm",
       "tokenizer_var": "tok", "device": "cuda:1", "dtype": "bfloat16", "hidden": true,
       "base_model": "/models/base", "is_peft": true}]}})");
  ASSERT_TRUE(config.is_ok()) << config.status().message();
  EXPECT_EQ(config->kernel.workspace_dir, "/workspace");
  ASSERT_EQ(config->kernel.models.size(), 2u);
  const kernel::PreloadedModel& tiny = config->kernel.models[0];
  EXPECT_EQ(tiny.var_name, "model");
  EXPECT_EQ(tiny.device, "cpu");
  EXPECT_EQ(tiny.dtype, "");
  EXPECT_FALSE(tiny.hidden);
  const kernel::PreloadedModel& llm = config->kernel.models[1];
  EXPECT_EQ(llm.var_name, "llm");
  EXPECT_EQ(llm.tokenizer_var, "tok");
  EXPECT_EQ(llm.device, "cuda:1");
  EXPECT_EQ(llm.dtype, "bfloat16");
  EXPECT_TRUE(llm.hidden);
  EXPECT_TRUE(llm.is_peft);
  EXPECT_EQ(llm.base_model, "/models/base");
  EXPECT_THAT(config_to_json(*config), HasSubstr("\"workspace_dir\": \"/workspace\""));
}

TEST(ModelConfig, BadEntriesNameTheKey) {
  EXPECT_THAT(error_of(R"({"models": {}})"), HasSubstr("kernel.models: expected an array"));
  EXPECT_THAT(error_of(R"({"models": [1]})"), HasSubstr("kernel.models[0]: expected an object"));
  EXPECT_THAT(error_of(R"({"models": [{"name": "m", "loader": "torchscript"}]})"), HasSubstr("kernel.models[0].path: required"));
  EXPECT_THAT(error_of(R"({"models": [{"name": "m", "path": "/m"}]})"), HasSubstr("kernel.models[0].loader: required"));
  EXPECT_THAT(error_of(with_model(R"(, "name": "")")), HasSubstr("kernel.models[0].name: expected"));
  EXPECT_THAT(error_of(with_model(R"(, "var_name": "class")")), HasSubstr("kernel.models[0].var_name: expected a Python identifier"));
  EXPECT_THAT(error_of(with_model(R"(, "var_name": "model_info")")), HasSubstr("kernel.models[0].var_name"));
  EXPECT_THAT(error_of(with_model(R"(, "tokenizer_var": "model")")), HasSubstr("kernel.models[0].tokenizer_var"));
  EXPECT_THAT(error_of(with_model(R"(, "device": "cuda:x")")), HasSubstr("kernel.models[0].device"));
  EXPECT_THAT(error_of(with_model(R"(, "dtype": "int8")")), HasSubstr("kernel.models[0].dtype"));
  EXPECT_THAT(error_of(with_model(R"(, "hidden": "yes")")), HasSubstr("kernel.models[0].hidden: expected true or false"));
  EXPECT_THAT(error_of(with_model(R"(, "is_peft": true)")), HasSubstr("kernel.models[0].base_model: required with is_peft"));
  EXPECT_THAT(error_of(with_model(R"(, "base_model": "/b")")), HasSubstr("kernel.models[0].base_model: only with is_peft"));
  EXPECT_THAT(error_of(R"({"models": [{"name": "m", "path": "/m", "loader": "torchscript", "tokenizer_var": "t"}]})"),
              HasSubstr("kernel.models[0].tokenizer_var: only with loader \"transformers\""));
  EXPECT_THAT(error_of(R"({"models": [{"name": "m", "path": "/m", "loader": "safetensors", "is_peft": true, "base_model": "/b"}]})"),
              HasSubstr("kernel.models[0].is_peft: only with loader \"transformers\""));
  std::string two = R"({"models": [{"name": "a", "path": "/a", "loader": "torchscript"},
                                    {"name": "a", "path": "/b", "loader": "torchscript", "var_name": "b"}]})";
  EXPECT_THAT(error_of(two), HasSubstr("kernel.models[1].name: expected a name no other model has"));
  EXPECT_THAT(error_of(R"({"workspace_dir": 3})"), HasSubstr("kernel.workspace_dir: expected a string"));
}

TEST(ModelSetup, HiddenModelsNeverReachTheExecutor) {
  kernel::PreloadedModel visible;
  visible.name = "tiny-net";
  visible.path = "/models/tiny.pt";
  visible.loader = "torchscript";
  kernel::PreloadedModel hidden;
  hidden.name = "secret-llama";
  hidden.path = "/models/secret-llama";
  hidden.var_name = "secret";
  hidden.loader = "transformers";
  hidden.hidden = true;
  // Not PID 1 of a sandbox: the hidden model is refused, with nothing placed.
  std::vector<kernel::ModelLoad> loads = place_models({visible, hidden}, "/nonexistent-state", false);
  ASSERT_EQ(loads.size(), 2u);
  EXPECT_EQ(loads[0].load_path, "/models/tiny.pt");
  EXPECT_EQ(loads[0].error, "");
  EXPECT_EQ(loads[1].load_path, "");
  EXPECT_THAT(loads[1].error, HasSubstr("PID 1 of its own mount namespace"));
  std::string code = kernel::models_setup_code(loads);
  EXPECT_THAT(code, HasSubstr("tiny-net"));
  EXPECT_THAT(code, Not(HasSubstr("secret-llama")));
  std::string report = kernel::pending_model_report(loads).dump();
  EXPECT_THAT(report, HasSubstr("/models/tiny.pt"));
  EXPECT_THAT(report, Not(HasSubstr("secret-llama")));
  EXPECT_THAT(report, HasSubstr(R"("status":"failed")"));
  EXPECT_THAT(report, HasSubstr(R"("status":"pending")"));
}

TEST(ModelSetup, WorkspaceCodeQuotesThePath) {
  std::string code = kernel::workspace_setup_code("/work/it's \"here\"");
  EXPECT_THAT(code, HasSubstr(R"("/work/it's \"here\"")"));
  EXPECT_THAT(code, HasSubstr("sys.path.insert(0, "));
}

}  // namespace
}  // namespace gpubox
