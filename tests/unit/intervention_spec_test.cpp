// hooks/' intervention spec decoder (decode_plan) and the hook points an
// architecture has (model/modeld/decoder/hook_points.h): what is accepted, normalized
// and refused, with the field and a few valid names in the message.
#include <algorithm>
#include <cstring>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "hooks/spec.h"
#include "model/modeld/decoder/hook_points.h"

namespace gpubox {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using nlohmann::json;

// A two-layer model's points for a batch of 2 rows of 5 tokens (4 heads of 16).
const std::vector<hooks::HookShape> kPoints = {
    {"hook_embed", {2, 5, 64}, 1, -1},
    {"blocks.0.hook_resid_post", {2, 5, 64}, 1, -1},
    {"blocks.1.hook_resid_post", {2, 5, 64}, 1, -1},
    {"blocks.0.attn.hook_q", {2, 5, 4, 16}, 1, 2},
    {"blocks.0.attn.hook_pattern", {2, 4, 5, 5}, 2, 1},
    {"logits", {2, 5, 320}, 1, -1},
};
// Attachment sizes: 0: 64 float32 (a vector), 1: 2*5*64 float32, 2: 64 bfloat16, 3: 16 float32.
const std::vector<std::size_t> kAttachments = {256, 2560, 128, 64};

Result<hooks::Plan> decode(const json& ops) { return hooks::decode_plan(ops, kPoints, kAttachments); }

std::string error_of(const json& ops) {
  auto plan = decode(ops);
  if (plan.is_ok()) {
    ADD_FAILURE() << "accepted: " << ops.dump();
    return {};
  }
  EXPECT_EQ(plan.status().code(), ErrorCode::invalid_request);
  return plan.status().message();
}

TEST(InterventionSpec, CapturesWithPositionsAndDtype) {
  auto plan = decode(json::parse(R"([{"op": "capture", "hook": "hook_embed"},
      {"op": "capture", "hook": "blocks.0.attn.hook_q", "positions": [0, -1, 2], "dtype": "model"}])"));
  ASSERT_TRUE(plan.is_ok()) << plan.status().message();
  ASSERT_EQ(plan->ops.size(), 2U);
  EXPECT_EQ(plan->capture_count(), 2U);
  EXPECT_EQ(plan->ops[0].hook, "hook_embed");
  EXPECT_TRUE(plan->ops[0].where.all());
  EXPECT_EQ(plan->ops[0].dtype, hooks::CaptureDtype::float32);
  EXPECT_EQ(plan->ops[1].point, 3U);
  EXPECT_THAT(plan->ops[1].where.positions, ElementsAre(0, 4, 2));
  EXPECT_EQ(plan->ops[1].dtype, hooks::CaptureDtype::model);
  EXPECT_TRUE(decode(json())->empty());
  EXPECT_TRUE(decode(json::array())->empty());
}

TEST(InterventionSpec, EditingOpsWithRowsHeadsAndTensors) {
  auto plan = decode(json::parse(R"([
      {"op": "add", "hook": "blocks.0.hook_resid_post", "vector": {"dtype": "float32", "shape": [64], "attachment": 0},
       "scale": 4.0, "positions": [-1]},
      {"op": "zero", "hook": "blocks.0.attn.hook_q", "heads": [1, -1], "rows": [1]},
      {"op": "scale", "hook": "blocks.0.attn.hook_pattern", "factor": 0.5, "heads": [0], "positions": [2]},
      {"op": "set", "hook": "hook_embed", "value": {"shape": [2, 5, 64], "attachment": 1}},
      {"op": "mean", "hook": "hook_embed", "value": {"dtype": "bfloat16", "shape": [64], "attachment": 2}, "rows": [0]},
      {"op": "project_out", "hook": "blocks.0.attn.hook_q", "direction": {"shape": [16], "attachment": 3}},
      {"op": "patch", "hook": "blocks.1.hook_resid_post", "from_row": 0, "rows": [1], "positions": [0, 1]},
      {"op": "patch", "hook": "blocks.1.hook_resid_post", "value": {"shape": [1, 1, 64], "attachment": 0}}])"));
  ASSERT_TRUE(plan.is_ok()) << plan.status().message();
  ASSERT_EQ(plan->ops.size(), 8U);
  EXPECT_EQ(plan->capture_count(), 0U);
  EXPECT_EQ(plan->ops[0].kind, hooks::OpKind::add);
  EXPECT_DOUBLE_EQ(plan->ops[0].factor, 4.0);
  EXPECT_THAT(plan->ops[0].where.positions, ElementsAre(4));
  EXPECT_THAT(plan->ops[0].tensor->shape, ElementsAre(64));
  EXPECT_THAT(plan->ops[1].where.heads, ElementsAre(1, 3));
  EXPECT_THAT(plan->ops[1].where.rows, ElementsAre(1));
  EXPECT_DOUBLE_EQ(plan->ops[2].factor, 0.5);
  EXPECT_EQ(plan->ops[3].tensor->attachment, 1U);
  EXPECT_EQ(plan->ops[4].tensor->dtype, hooks::WireDtype::bfloat16);
  EXPECT_EQ(plan->ops[5].kind, hooks::OpKind::project_out);
  EXPECT_EQ(plan->ops[6].from_row, 0);
  EXPECT_FALSE(plan->ops[6].tensor.has_value());
  EXPECT_TRUE(plan->ops[7].tensor.has_value());
  EXPECT_EQ(plan->ops[7].index, 7U);
}

TEST(InterventionSpec, InactiveOpsAreSkippedUncheckedAndKeepTheirIndex) {
  json ops = json::parse(R"([{"op": "capture", "hook": "logits", "positions": [9]},
      {"op": "capture", "hook": "hook_embed"}, {"op": "zero", "hook": "nope"}])");
  auto plan = hooks::decode_plan(ops, kPoints, kAttachments, {false, true, false});
  ASSERT_TRUE(plan.is_ok()) << plan.status().message();
  ASSERT_EQ(plan->ops.size(), 1U);
  EXPECT_EQ(plan->ops[0].index, 1U);
  EXPECT_THAT(hooks::decode_plan(ops, kPoints, kAttachments, {false, true, true}).status().message(),
              HasSubstr("params.ops[2].hook"));
}

TEST(InterventionSpec, RefusalsNameTheFieldAndSuggestNames) {
  std::string unknown = error_of(json::parse(R"([{"op": "capture", "hook": "blocks.7.hook_resid_post"}])"));
  EXPECT_THAT(unknown, HasSubstr("params.ops[0].hook"));
  EXPECT_THAT(unknown, HasSubstr("blocks.7.hook_resid_post"));
  EXPECT_THAT(unknown, HasSubstr("blocks.0.hook_resid_post, blocks.1.hook_resid_post"));
  EXPECT_THAT(error_of(json::parse(R"([{"op": "capture", "hook": "zzz"}])")), HasSubstr("hook_embed"));
  EXPECT_THAT(error_of(json::parse(R"([{"op": "capture", "hook": "logits", "positions": [5]}])")),
              HasSubstr("params.ops[0].positions: 5 is out of range for 5 positions"));
  EXPECT_THAT(error_of(json::parse(R"([{"op": "capture", "hook": "logits", "positions": [-6]}])")), HasSubstr("-6"));
  EXPECT_THAT(error_of(json::parse(R"([{"op": "capture", "hook": "logits", "positions": [1.5]}])")), HasSubstr("1.5"));
  EXPECT_THAT(error_of(json::parse(R"([{"op": "capture", "hook": "logits", "positions": []}])")), HasSubstr("positions"));
  EXPECT_THAT(error_of(json::parse(R"([{"op": "capture", "hook": "logits", "rows": [2]}])")),
              HasSubstr("params.ops[0].rows: 2 is out of range for 2 batch rows"));
  EXPECT_THAT(error_of(json::parse(R"([{"op": "capture", "hook": "logits", "dtype": "int8"}])")), HasSubstr("\"int8\""));
  EXPECT_THAT(error_of(json::parse(R"([{"op": "capture", "hook": "logits"}, {"op": "steer", "hook": "logits"}])")),
              HasSubstr("params.ops[1].op: unknown operation \"steer\" (supported: capture, set, add"));
  EXPECT_THAT(error_of(json::parse(R"([{"op": "capture", "hook": "logits", "heads": [0]}])")), HasSubstr("no heads axis"));
  EXPECT_THAT(error_of(json::parse(R"([{"op": "zero", "hook": "blocks.0.attn.hook_q", "heads": [4]}])")),
              HasSubstr("4 is out of range for 4 heads"));
  EXPECT_THAT(error_of(json::parse(R"([{"op": "capture", "hook": "logits", "factor": 2}])")),
              HasSubstr("unknown field \"factor\" (capture takes hook, rows, positions, heads, dtype)"));
  EXPECT_THAT(error_of(json::parse(R"([3])")), HasSubstr("params.ops[0]"));
  EXPECT_THAT(error_of(json::parse(R"({"op": "capture"})")), HasSubstr("params.ops: expected a list"));
}

TEST(InterventionSpec, AWrongHookNameSuggestsTheNearestNames) {
  // A name without its "hook_" is nearest to the point it meant, not to the first points of the model.
  EXPECT_THAT(error_of(json::parse(R"([{"op": "capture", "hook": "blocks.0.resid_post"}])")),
              HasSubstr("the nearest valid names are blocks.0.hook_resid_post, blocks.1.hook_resid_post, "));
  EXPECT_THAT(error_of(json::parse(R"([{"op": "capture", "hook": "blocks.0.attn.pattern"}])")),
              HasSubstr("the nearest valid names are blocks.0.attn.hook_pattern, "));
}

// The bytes of n little-endian elements of size bytes each, all zero but element at, which is bits.
std::string bytes_with(std::size_t n, std::size_t size, std::size_t at, std::uint32_t bits) {
  std::string data(n * size, '\0');
  std::memcpy(data.data() + at * size, &bits, size);
  return data;
}

TEST(InterventionSpec, NonFiniteTensorsAreRefusedUnlessAllowed) {
  // 0: 64 float32; 1: 2*5*64 float32; 2: 64 bfloat16; 3: 16 float32, as kAttachments' sizes.
  std::vector<std::string> data = {bytes_with(64, 4, 5, 0x7fc00000u), bytes_with(640, 4, 64 * 5 + 3, 0xff800000u),
                                   bytes_with(64, 2, 63, 0x7f80u), std::string(64, '\0')};
  std::vector<std::string_view> views(data.begin(), data.end());
  auto finite = [&](const json& ops) {
    auto plan = decode(ops);
    EXPECT_TRUE(plan.is_ok()) << plan.status().message();
    return plan.is_ok() ? hooks::check_finite(*plan, views) : plan.status();
  };
  auto add = json::parse(R"([{"op": "capture", "hook": "logits"},
      {"op": "add", "hook": "hook_embed", "vector": {"shape": [64], "attachment": 0}}])");
  Status nan = finite(add);
  EXPECT_EQ(nan.code(), ErrorCode::invalid_request);
  EXPECT_THAT(nan.message(), HasSubstr("params.ops[1].vector: element [5] is NaN; tensors must be finite"));
  EXPECT_THAT(nan.message(), HasSubstr("\"allow_nonfinite\": true"));
  EXPECT_THAT(finite(json::parse(R"([{"op": "set", "hook": "hook_embed",
      "value": {"shape": [2, 5, 64], "attachment": 1}}])")).message(),
              HasSubstr("params.ops[0].value: element [1, 0, 3] is -inf"));
  EXPECT_THAT(finite(json::parse(R"([{"op": "project_out", "hook": "hook_embed",
      "direction": {"dtype": "bfloat16", "shape": [64], "attachment": 2}}])")).message(),
              HasSubstr("params.ops[0].direction: element [63] is +inf"));
  add[1]["allow_nonfinite"] = true;
  EXPECT_TRUE(finite(add).is_ok());
  add[1]["allow_nonfinite"] = "yes";
  EXPECT_THAT(error_of(add), HasSubstr("params.ops[1].allow_nonfinite: expected true or false"));
  EXPECT_TRUE(finite(json::parse(R"([{"op": "mean", "hook": "blocks.0.attn.hook_q",
      "value": {"shape": [16], "attachment": 3}}])")).is_ok());
  EXPECT_THAT(error_of(json::parse(R"([{"op": "zero", "hook": "hook_embed", "allow_nonfinite": true}])")),
              HasSubstr("unknown field \"allow_nonfinite\""));
}

TEST(InterventionSpec, TensorsMustFitTheirAttachmentAndTheirRegion) {
  auto add = [](const char* vector) {
    return json::parse(std::string(R"([{"op": "add", "hook": "hook_embed", "vector": )") + vector + "}]");
  };
  EXPECT_THAT(error_of(json::parse(R"([{"op": "add", "hook": "hook_embed"}])")), HasSubstr("params.ops[0].vector: add needs"));
  EXPECT_THAT(error_of(add(R"({"shape": [65], "attachment": 0})")),
              HasSubstr("attachment 0 holds 256 bytes; shape [65] of float32 needs 260"));
  EXPECT_THAT(error_of(add(R"({"shape": [64], "attachment": 4})")), HasSubstr("one of the request's 4 attachments"));
  EXPECT_THAT(error_of(add(R"({"shape": [64], "attachment": 0, "dtype": "int8"})")), HasSubstr("\"int8\""));
  EXPECT_THAT(error_of(add(R"({"shape": [-64], "attachment": 0})")), HasSubstr("-64 is not a size"));
  EXPECT_THAT(error_of(add(R"({"shape": [64], "attachment": 0, "device": "cuda"})")), HasSubstr("unknown field \"device\""));
  EXPECT_THAT(error_of(add(R"({"shape": [4, 16], "attachment": 0})")),
              HasSubstr("shape [4, 16] does not broadcast to the selected part of hook_embed, [2, 5, 64]"));
  EXPECT_THAT(error_of(json::parse(R"([{"op": "set", "hook": "hook_embed", "rows": [0],
      "value": {"shape": [2, 5, 64], "attachment": 1}}])")), HasSubstr("[1, 5, 64]"));
  EXPECT_THAT(error_of(json::parse(R"([{"op": "project_out", "hook": "blocks.0.attn.hook_q",
      "direction": {"shape": [64], "attachment": 0}}])")), HasSubstr("has shape [16]"));
  EXPECT_THAT(error_of(json::parse(R"([{"op": "patch", "hook": "hook_embed"}])")), HasSubstr("either value"));
  EXPECT_THAT(error_of(json::parse(R"([{"op": "patch", "hook": "hook_embed", "from_row": 2}])")), HasSubstr("from_row: 2"));
  EXPECT_THAT(error_of(json::parse(R"([{"op": "scale", "hook": "hook_embed"}])")), HasSubstr("factor"));
  EXPECT_THAT(error_of(json::parse(R"([{"op": "add", "hook": "hook_embed", "scale": "big",
      "vector": {"shape": [64], "attachment": 0}}])")), HasSubstr("params.ops[0].scale: expected a finite number"));
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
      EXPECT_EQ(p.head_axis, 2);
    } else if (p.name == "blocks.0.attn.hook_pattern") {
      EXPECT_EQ(p.position_axis, 2);
      EXPECT_EQ(p.head_axis, 1);
    } else if (p.name == "blocks.0.hook_resid_post") {
      EXPECT_EQ(p.position_axis, 1);
      EXPECT_EQ(p.head_axis, -1);
    } else if (p.name == "blocks.0.attn.hook_result") {  // every query head's output, d_model wide; opt-in
      EXPECT_EQ(p.shape, json::parse(R"(["batch", "pos", 4, 64])"));
      EXPECT_EQ(p.head_axis, 2);
    }
    EXPECT_EQ(p.opt_in, p.name.ends_with("attn.hook_result")) << p.name;
  }
  auto after_z = std::find_if(llama.begin(), llama.end(), [](const auto& p) { return p.name == "blocks.1.attn.hook_z"; }) + 1;
  EXPECT_EQ(after_z->name, "blocks.1.attn.hook_result");
  EXPECT_EQ((after_z + 1)->name, "blocks.1.hook_attn_out");
  for (const auto& shape : modeld::request_shapes(llama, 3, 7, 9)) {
    if (shape.name == "blocks.1.attn.hook_pattern") {
      EXPECT_THAT(shape.dims, ElementsAre(3, 4, 7, 9));
    } else if (shape.name == "blocks.1.attn.hook_v") {
      EXPECT_THAT(shape.dims, ElementsAre(3, 7, 2, 16));
    } else if (shape.name == "blocks.1.attn.hook_result") {
      EXPECT_THAT(shape.dims, ElementsAre(3, 7, 4, 64));
      EXPECT_EQ(shape.head_axis, 2);
    } else if (shape.name == "logits") {
      EXPECT_THAT(shape.dims, ElementsAre(3, 7, 320));
    }
  }
  a.gated_mlp = false, a.learned_positions = true, a.rope.kind = modeld::RopeKind::none;
  EXPECT_THAT(names(a), ::testing::Contains("hook_pos_embed"));
  EXPECT_THAT(names(a), ::testing::Not(::testing::Contains("blocks.0.mlp.hook_pre_linear")));
  EXPECT_THAT(names(a), ::testing::Not(::testing::Contains("blocks.0.attn.hook_rot_q")));
}

// Two SAEs: "res0" on blocks.0.hook_resid_post (64 wide, 256 features), "wide" of a 32-wide point (a misfit).
const std::vector<hooks::SaeShape> kSaes = {{"res0", "blocks.0.hook_resid_post", 64, 256}, {"wide", "hook_embed", 32, 128}};

Result<hooks::Plan> decode_sae(const json& ops) { return hooks::decode_plan(ops, kPoints, kAttachments, {}, kSaes); }

std::string sae_error_of(const json& ops) {
  auto plan = decode_sae(ops);
  if (plan.is_ok()) {
    ADD_FAILURE() << "accepted: " << ops.dump();
    return {};
  }
  EXPECT_EQ(plan.status().code(), ErrorCode::invalid_request);
  return plan.status().message();
}

TEST(InterventionSpec, SaeOpsTakeTheirSaesHookAndNormalizeFeatures) {
  auto plan = decode_sae(json::parse(R"([
      {"op": "sae_capture", "sae": "res0", "top_k": 8, "positions": [-1]},
      {"op": "sae_steer", "sae": "res0", "features": [3, -1], "scale": 4.5, "rows": [1]},
      {"op": "sae_ablate", "sae": "res0", "hook": "blocks.0.hook_resid_post", "features": [7]},
      {"op": "sae_set", "sae": "res0", "features": [1, 2], "values": [0.5, 2]},
      {"op": "sae_set", "sae": "res0", "features": [9], "values": 3},
      {"op": "sae_splice", "sae": "res0"},
      {"op": "sae_capture", "sae": "res0"}])"));
  ASSERT_TRUE(plan.is_ok()) << plan.status().message();
  ASSERT_EQ(plan->ops.size(), 7U);
  EXPECT_EQ(plan->ops[0].hook, "blocks.0.hook_resid_post");
  EXPECT_EQ(plan->ops[0].point, 1U);
  EXPECT_EQ(plan->ops[0].top_k, 8);
  EXPECT_EQ(plan->ops[0].capture_outputs(), 2U);
  EXPECT_THAT(plan->ops[0].where.positions, ElementsAre(4));
  EXPECT_THAT(plan->ops[1].features, ElementsAre(3, 255));
  EXPECT_DOUBLE_EQ(plan->ops[1].factor, 4.5);
  EXPECT_THAT(plan->ops[3].values, ElementsAre(0.5, 2.0));
  EXPECT_THAT(plan->ops[4].values, ElementsAre(3.0));
  EXPECT_EQ(plan->ops[6].capture_outputs(), 1U);
  EXPECT_EQ(plan->capture_count(), 2U);
  EXPECT_EQ(hooks::capture_name(plan->ops[0], kSaes, 0), "sae:res0:indices");
  EXPECT_EQ(hooks::capture_name(plan->ops[0], kSaes, 1), "sae:res0:values");
  EXPECT_EQ(hooks::capture_name(plan->ops[6], kSaes), "sae:res0");
  EXPECT_EQ(hooks::capture_name(plan->ops[1], kSaes), "blocks.0.hook_resid_post");
}

TEST(InterventionSpec, SaeOpsRefuseBadInputNamingTheField) {
  EXPECT_THAT(sae_error_of(json::parse(R"([{"op": "sae_capture", "sae": "nope"}])")),
              HasSubstr("params.ops[0].sae: this model has no SAE \"nope\" (loaded: res0, wide"));
  EXPECT_THAT(error_of(json::parse(R"([{"op": "sae_capture", "sae": "res0"}])")), HasSubstr("(loaded: none;"));
  EXPECT_THAT(sae_error_of(json::parse(R"([{"op": "sae_capture"}])")), HasSubstr("params.ops[0].sae: expected the name"));
  EXPECT_THAT(sae_error_of(json::parse(R"([{"op": "sae_ablate", "sae": "res0", "features": [256]}])")),
              HasSubstr("params.ops[0].features: 256 is out of range for 256 SAE features"));
  EXPECT_THAT(sae_error_of(json::parse(R"([{"op": "sae_ablate", "sae": "res0"}])")), HasSubstr("params.ops[0].features: expected a non-empty list"));
  EXPECT_THAT(sae_error_of(json::parse(R"([{"op": "sae_capture", "sae": "res0", "top_k": 0}])")),
              HasSubstr("params.ops[0].top_k: expected an integer from 1 to d_sae (256)"));
  EXPECT_THAT(sae_error_of(json::parse(R"([{"op": "sae_set", "sae": "res0", "features": [1, 2], "values": [1]}])")),
              HasSubstr("params.ops[0].values: 1 values for 2 features"));
  EXPECT_THAT(sae_error_of(json::parse(R"([{"op": "sae_set", "sae": "res0", "features": [1]}])")), HasSubstr("params.ops[0].values"));
  EXPECT_THAT(sae_error_of(json::parse(R"([{"op": "sae_splice", "sae": "res0", "hook": "hook_embed"}])")),
              HasSubstr("params.ops[0].hook: SAE \"res0\" reads blocks.0.hook_resid_post"));
  EXPECT_THAT(sae_error_of(json::parse(R"([{"op": "sae_splice", "sae": "wide"}])")),
              HasSubstr("params.ops[0].sae: SAE \"wide\" is 32 wide (d_in), hook_embed is 64 wide"));
  EXPECT_THAT(sae_error_of(json::parse(R"([{"op": "sae_steer", "sae": "res0", "features": [1], "factor": 2}])")),
              HasSubstr("unknown field \"factor\""));
  EXPECT_THAT(sae_error_of(json::parse(R"([{"op": "sae_steer", "sae": "res0", "features": [1], "heads": [0]}])")),
              HasSubstr("params.ops[0].heads"));
}

}  // namespace
}  // namespace gpubox
