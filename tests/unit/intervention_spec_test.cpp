// hooks/' intervention spec decoder (decode_plan) and the hook points an
// architecture has (model/modeld/hook_points.h): what is accepted, normalized
// and refused, with the field and a few valid names in the message.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "hooks/spec.h"
#include "model/modeld/hook_points.h"

namespace gpubox {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using nlohmann::json;

const std::vector<std::string> kNames = {"hook_embed", "blocks.0.hook_resid_post", "blocks.1.hook_resid_post",
                                         "blocks.0.attn.hook_q", "logits"};

std::string error_of(const json& ops, std::int64_t tokens = 5) {
  auto plan = hooks::decode_plan(ops, kNames, tokens);
  if (plan.is_ok()) {
    ADD_FAILURE() << "accepted: " << ops.dump();
    return {};
  }
  EXPECT_EQ(plan.status().code(), ErrorCode::invalid_request);
  return plan.status().message();
}

TEST(InterventionSpec, CapturesWithPositionsAndDtype) {
  auto plan = hooks::decode_plan(json::parse(R"([{"op": "capture", "hook": "hook_embed"},
      {"op": "capture", "hook": "blocks.0.attn.hook_q", "positions": [0, -1, 2], "dtype": "model"}])"), kNames, 5);
  ASSERT_TRUE(plan.is_ok()) << plan.status().message();
  ASSERT_EQ(plan->captures.size(), 2U);
  EXPECT_EQ(plan->captures[0].hook, "hook_embed");
  EXPECT_TRUE(plan->captures[0].positions.empty());
  EXPECT_EQ(plan->captures[0].dtype, hooks::CaptureDtype::float32);
  EXPECT_THAT(plan->captures[1].positions, ElementsAre(0, 4, 2));
  EXPECT_EQ(plan->captures[1].dtype, hooks::CaptureDtype::model);
  EXPECT_TRUE(hooks::decode_plan(json(), kNames, 5)->empty());
  EXPECT_TRUE(hooks::decode_plan(json::array(), kNames, 5)->empty());
}

TEST(InterventionSpec, RefusalsNameTheFieldAndSuggestNames) {
  std::string unknown = error_of(json::parse(R"([{"op": "capture", "hook": "blocks.7.hook_resid_post"}])"));
  EXPECT_THAT(unknown, HasSubstr("params.ops[0].hook"));
  EXPECT_THAT(unknown, HasSubstr("blocks.7.hook_resid_post"));
  EXPECT_THAT(unknown, HasSubstr("blocks.0.hook_resid_post, blocks.1.hook_resid_post"));
  EXPECT_THAT(error_of(json::parse(R"([{"op": "capture", "hook": "zzz"}])")), HasSubstr("hook_embed"));
  EXPECT_THAT(error_of(json::parse(R"([{"op": "capture", "hook": "logits", "positions": [5]}])")),
              HasSubstr("params.ops[0].positions: 5 is out of range for 5 tokens"));
  EXPECT_THAT(error_of(json::parse(R"([{"op": "capture", "hook": "logits", "positions": [-6]}])")), HasSubstr("-6"));
  EXPECT_THAT(error_of(json::parse(R"([{"op": "capture", "hook": "logits", "positions": [1.5]}])")), HasSubstr("1.5"));
  EXPECT_THAT(error_of(json::parse(R"([{"op": "capture", "hook": "logits", "positions": []}])")), HasSubstr("positions"));
  EXPECT_THAT(error_of(json::parse(R"([{"op": "capture", "hook": "logits", "dtype": "int8"}])")), HasSubstr("\"int8\""));
  EXPECT_THAT(error_of(json::parse(R"([{"op": "capture", "hook": "logits"}, {"op": "add", "hook": "logits"}])")),
              HasSubstr("params.ops[1].op: unknown operation \"add\""));
  EXPECT_THAT(error_of(json::parse(R"([{"op": "capture", "hook": "logits", "heads": [0]}])")), HasSubstr("\"heads\""));
  EXPECT_THAT(error_of(json::parse(R"([3])")), HasSubstr("params.ops[0]"));
  EXPECT_THAT(error_of(json::parse(R"({"op": "capture"})")), HasSubstr("params.ops: expected a list"));
}

TEST(HookPoints, EachArchitectureHasItsOwn) {
  modeld::Architecture a;
  a.num_layers = 2, a.hidden_size = 64, a.num_heads = 4, a.num_kv_heads = 2, a.head_dim = 16;
  a.intermediate_size = 128, a.vocab_size = 320, a.rope.kind = modeld::RopeKind::default_rope;
  auto names = [](const modeld::Architecture& arch) {
    std::vector<std::string> out;
    for (const auto& p : modeld::hook_points(arch)) out.push_back(p.name);
    return out;
  };
  auto llama = modeld::hook_points(a);
  EXPECT_EQ(llama.front().name, "hook_embed");
  EXPECT_EQ(llama.back().name, "logits");
  EXPECT_THAT(names(a), ::testing::Contains("blocks.1.mlp.hook_pre_linear"));
  EXPECT_THAT(names(a), ::testing::Not(::testing::Contains("hook_pos_embed")));
  for (const auto& p : llama) {
    if (p.name == "blocks.0.attn.hook_k") {
      EXPECT_EQ(p.shape, json::parse(R"(["batch", "pos", 2, 16])"));
    } else if (p.name == "blocks.0.attn.hook_pattern") {
      EXPECT_EQ(p.position_axis, 2);
    } else if (p.name == "blocks.0.hook_resid_post") {
      EXPECT_EQ(p.position_axis, 1);
    }
  }
  a.gated_mlp = false, a.learned_positions = true, a.rope.kind = modeld::RopeKind::none;
  EXPECT_THAT(names(a), ::testing::Contains("hook_pos_embed"));
  EXPECT_THAT(names(a), ::testing::Not(::testing::Contains("blocks.0.mlp.hook_pre_linear")));
  EXPECT_THAT(names(a), ::testing::Not(::testing::Contains("blocks.0.attn.hook_rot_q")));
}

}  // namespace
}  // namespace gpubox
