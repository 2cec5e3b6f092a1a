// hooks/sae_config.h: SAELens' cfg.json read into the settings modeld computes
// with — 6.x and pre-6.0 keys, defaults as SAELens has them, and every
// setting the host does not apply refused by name.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "hooks/sae_config.h"

namespace gpubox {
namespace {

using ::testing::HasSubstr;
using nlohmann::json;
using hooks::SaeArchitecture;
using hooks::SaeNormalization;

Result<hooks::SaeConfig> parse(const json& config) { return hooks::parse_sae_config(config.dump(), "cfg.json"); }

std::string error_of(const json& config) {
  auto parsed = parse(config);
  if (parsed.is_ok()) {
    ADD_FAILURE() << "accepted: " << config.dump();
    return {};
  }
  EXPECT_EQ(parsed.status().code(), ErrorCode::invalid_request);
  return parsed.status().message();
}

TEST(SaeConfig, ReadsSaeLens6ConfigWithMetadata) {
  auto parsed = parse(json::parse(R"({"architecture": "jumprelu", "d_in": 64, "d_sae": 256, "dtype": "float32",
      "device": "cpu", "apply_b_dec_to_input": false, "normalize_activations": "layer_norm",
      "reshape_activations": "none", "metadata": {"hook_name": "blocks.1.hook_resid_post", "model_name": "tiny",
      "hook_head_index": null, "sae_lens_version": "6.51.1"}})"));
  ASSERT_TRUE(parsed.is_ok()) << parsed.status().message();
  EXPECT_EQ(parsed->architecture, SaeArchitecture::jumprelu);
  EXPECT_EQ(parsed->d_in, 64);
  EXPECT_EQ(parsed->d_sae, 256);
  EXPECT_FALSE(parsed->apply_b_dec_to_input);
  EXPECT_EQ(parsed->normalization, SaeNormalization::layer_norm);
  EXPECT_EQ(parsed->hook_name, "blocks.1.hook_resid_post");
  EXPECT_EQ(parsed->model_name, "tiny");
}

TEST(SaeConfig, DefaultsAreSaeLens) {
  auto parsed = parse({{"d_in", 8}, {"d_sae", 32}, {"hook_point", "hook_embed"}});
  ASSERT_TRUE(parsed.is_ok()) << parsed.status().message();
  EXPECT_EQ(parsed->architecture, SaeArchitecture::standard);
  EXPECT_TRUE(parsed->apply_b_dec_to_input);
  EXPECT_EQ(parsed->normalization, SaeNormalization::none);
  EXPECT_EQ(parsed->hook_name, "hook_embed");  // pre-6.0's key
}

TEST(SaeConfig, TopKReadsKAndThePre6Spelling) {
  auto six = parse({{"architecture", "topk"}, {"d_in", 8}, {"d_sae", 32}, {"k", 4}, {"rescale_acts_by_decoder_norm", true}});
  ASSERT_TRUE(six.is_ok()) << six.status().message();
  EXPECT_EQ(six->k, 4);
  EXPECT_TRUE(six->rescale_acts_by_decoder_norm);
  auto old = parse({{"activation_fn_str", "topk"}, {"activation_fn_kwargs", {{"k", 3}}}, {"d_in", 8}, {"d_sae", 32}});
  ASSERT_TRUE(old.is_ok()) << old.status().message();
  EXPECT_EQ(old->architecture, SaeArchitecture::topk);
  EXPECT_EQ(old->k, 3);
  auto defaulted = parse({{"architecture", "topk"}, {"d_in", 8}, {"d_sae", 512}});
  ASSERT_TRUE(defaulted.is_ok());
  EXPECT_EQ(defaulted->k, 100);  // TopKSAEConfig's default
}

TEST(SaeConfig, RefusesWhatTheHostDoesNotApplyNamingTheKey) {
  json base = {{"d_in", 8}, {"d_sae", 32}};
  auto with = [&](const char* key, json value) {
    json c = base;
    c[key] = value;
    return c;
  };
  EXPECT_THAT(error_of(with("architecture", "gated")), HasSubstr("architecture: \"gated\" is not supported"));
  EXPECT_THAT(error_of(with("normalize_activations", "expected_average_only_in")),
              HasSubstr("normalize_activations: \"expected_average_only_in\" needs a scaling factor"));
  EXPECT_THAT(error_of(with("normalize_activations", "covariance_whitening")), HasSubstr("normalize_activations"));
  EXPECT_THAT(error_of(with("reshape_activations", "hook_z")), HasSubstr("reshape_activations"));
  EXPECT_THAT(error_of(with("hook_head_index", 3)), HasSubstr("hook_head_index"));
  EXPECT_THAT(error_of(with("activation_fn", "tanh-relu")), HasSubstr("activation_fn"));
  EXPECT_THAT(error_of(with("apply_b_dec_to_input", "yes")), HasSubstr("apply_b_dec_to_input: expected true or false"));
  EXPECT_THAT(error_of({{"d_sae", 32}}), HasSubstr("d_in: required"));
  EXPECT_THAT(error_of({{"d_in", 8}, {"d_sae", -1}}), HasSubstr("d_sae: expected an integer"));
  EXPECT_THAT(error_of({{"architecture", "topk"}, {"d_in", 8}, {"d_sae", 32}, {"k", 33}}), HasSubstr("k: expected an integer from 1 to d_sae (32)"));
  EXPECT_THAT(error_of({{"architecture", "topk"}, {"d_in", 8}, {"d_sae", 32}}), HasSubstr("k: required"));
  EXPECT_THAT(hooks::parse_sae_config("{", "x/cfg.json").status().message(), HasSubstr("x/cfg.json: not valid JSON"));
  EXPECT_THAT(error_of(json::array()), HasSubstr("expected a JSON object"));
}

}  // namespace
}  // namespace gpubox
