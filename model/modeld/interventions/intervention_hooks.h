// InterventionHooks: the Hooks of a model.run plan — at each hook point the
// plan names it applies the plan's operations there, in order: captures copy
// the selected part of the activation, the other operations replace it.
#pragma once

#include <ATen/core/Tensor.h>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include <functional>
#include <memory>
#include <optional>
#include <zmq.hpp>

#include "hooks/spec.h"
#include "model/modeld/decoder/decoder.h"
#include "model/modeld/scheduler/generation.h"
#include "model/modeld/decoder/hook_points.h"
#include "model/modeld/interventions/sae.h"
#include "model/modeld/interventions/user_fn.h"

namespace gpubox::modeld {

// The index tensors of hook selections (rows, positions, heads, and the
// whole-axis ranges between them) on the model's device, each uploaded once
// per call rather than at every application. One call's thread only.
class DeviceIndexCache {
 public:
  const at::Tensor& list(const std::vector<std::int64_t>& values, c10::Device device);
  const at::Tensor& arange(std::int64_t size, c10::Device device);

 private:
  std::map<std::vector<std::int64_t>, at::Tensor> lists_;
  std::map<std::int64_t, at::Tensor> aranges_;
};

// The SAEs a request may name, held for its whole length (an sae_unload meanwhile waits for none):
// shapes for decode_plan, and the SAE of each, in the same order (sae_set.h makes them).
struct RequestSaes {
  std::vector<hooks::SaeShape> shapes;
  std::vector<std::shared_ptr<const Sae>> saes;
};

// Applies a checked plan's operations during one forward pass.
class InterventionHooks final : public Hooks {
 public:
  // points: the model's hook points, in the order decode_plan was given them;
  // op_tensors: one per op of the plan, the tensor it was sent (on the model's device; undefined for none);
  // saes: what decode_plan's saes stood for (sae_* ops index them);
  // indices: shared by the passes of one call (generate's); a fresh cache when null.
  InterventionHooks(const hooks::Plan& plan, const std::vector<HookPointInfo>& points,
                    const std::vector<at::Tensor>& op_tensors, const RequestSaes* saes = nullptr,
                    std::shared_ptr<DeviceIndexCache> indices = nullptr);
  bool wants(HookPoint point, int layer) const override;
  void apply(HookPoint point, int layer, at::Tensor& value) override;
  // One tensor per capture output (Op::capture_outputs: a top-k sae_capture's indices then values),
  // in the plan's order (undefined if the forward pass never reached its point).
  const std::vector<at::Tensor>& captured() const { return captured_; }
  // After backward() of a scalar of this pass: one gradient per capture_grad, in the plan's order
  // (float32, the op's selection; undefined where the scalar does not depend on the point).
  std::vector<at::Tensor> gradients() const;
  // fn ops: one binding per op of the plan (FnBinder); stop says, before each
  // function runs, whether the call may go on (its deadline, a cancel).
  void bind_fns(std::vector<FnBinding> fns, std::function<Status()> stop);
  // Not ok once a function failed (raised, returned a wrong value) or the call
  // stopped: every later op of the pass is then skipped, and the call fails with it.
  const Status& failure() const { return failure_; }
  // What fn ops returned to capture, as "HOOK:NAME", in the order they ran.
  const FnCaptures& fn_captures() const { return fn_captures_; }

 private:
  struct Step {
    const hooks::Op* op;
    HookPoint point;
    int layer;
    int position_axis;
    int head_axis;
    std::size_t capture;  // index into captured_ (captures) or watched_ (capture_grad)
    at::Tensor tensor;    // the op's tensor, if it has one
    std::size_t plan_index;  // its op's place in the plan
  };
  void run(const Step& step, at::Tensor& value);
  // An fn op's replacement of region (undefined: none), or a failure.
  Result<at::Tensor> run_fn(const Step& step, const at::Tensor& region);
  // An sae_* op on region (the selected part of value); returns its replacement, or undefined for a capture.
  at::Tensor run_sae(const Step& step, const at::Tensor& region);

  std::shared_ptr<DeviceIndexCache> indices_;
  std::vector<Step> steps_;
  std::set<std::pair<int, int>> wanted_;  // (point, layer)
  std::vector<at::Tensor> captured_;
  std::vector<std::pair<const Step*, at::Tensor>> watched_;  // capture_grad: the value whose gradient is wanted
  const RequestSaes* saes_ = nullptr;
  std::vector<FnBinding> fns_;
  std::function<Status()> stop_;
  Status failure_;
  FnCaptures fn_captures_;
};

// The scalar a model.run's capture_grad ops take the gradient of (params.grad_of):
// {"logit": {"token", "position"?}}, {"logit_diff": {"tokens": [a, b], "position"?}}
// (summed over the batch rows; position -1 by default) or {"loss": {}} (the
// mean next-token cross-entropy over the prompts' own tokens).
struct GradientTarget {
  enum class Kind { logit, logit_diff, loss } kind = Kind::logit;
  std::int64_t token = 0, other = 0;
  std::int64_t position = -1;  // normalized
};

// Checks grad_of against the vocabulary and the padded length; invalid_request naming the field.
Result<GradientTarget> decode_gradient_target(const nlohmann::json& grad_of, std::int64_t vocab, std::int64_t tokens);

// The scalar of target for logits [batch, tokens, vocab] of input.
at::Tensor gradient_scalar(const GradientTarget& target, const at::Tensor& logits, const ForwardInput& input);

// model.generate's interventions: the request's ops, each with an optional
// "steps" (the passes it applies at; every pass without), decoded for each
// pass's shapes; each pass's captures go to the sink once the pass ran.
class GenerationInterventions final : public PassHooks {
 public:
  using CaptureSink = std::function<Status(std::int64_t pass, const std::string& hook, const at::Tensor& value)>;

  // Checks ops against the prompt pass and the first and last later passes
  // (only key_pos changes between those) before anything runs.
  // saes: the request's SAEs (kept alive by the caller until the generation ends);
  // fns: the model's loaded functions as the call's session sees them (fn ops bind theirs here); stop: InterventionHooks::bind_fns's.
  static Result<std::unique_ptr<GenerationInterventions>> make(const nlohmann::json& ops, const Architecture& architecture,
                                                               std::int64_t rows, std::int64_t prompt_tokens,
                                                               std::int64_t passes, const std::vector<zmq::message_t>& attachments,
                                                               c10::Device device, CaptureSink sink, const RequestSaes* saes = nullptr,
                                                               FnScope fns = {}, std::function<Status()> stop = {});
  Result<Hooks*> begin(std::int64_t pass, std::int64_t tokens, std::int64_t keys) override;
  Status end(std::int64_t pass) override;

 private:
  GenerationInterventions() = default;
  static bool active(const std::optional<std::vector<std::int64_t>>& steps, std::int64_t pass);
  Result<hooks::Plan> plan_for(const std::vector<bool>& active, std::int64_t tokens, std::int64_t keys) const;

  nlohmann::json ops_;                             // the request's ops without "steps"
  std::vector<std::optional<std::vector<std::int64_t>>> steps_;  // per op; nullopt: every pass
  std::vector<HookPointInfo> points_;
  std::int64_t rows_ = 0;
  std::vector<std::size_t> attachment_bytes_;
  std::vector<at::Tensor> op_tensors_;             // per op of the request
  std::vector<FnBinding> fns_;                     // per op of the request
  std::function<Status()> stop_;
  CaptureSink sink_;
  hooks::Plan plan_;                               // the running pass's
  std::shared_ptr<DeviceIndexCache> indices_ = std::make_shared<DeviceIndexCache>();  // every pass's
  std::optional<InterventionHooks> hooks_;
  const RequestSaes* saes_ = nullptr;
};

}  // namespace gpubox::modeld
