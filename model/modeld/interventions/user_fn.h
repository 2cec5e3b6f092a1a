// The fn op's functions: a caller's TorchScript function (torch.jit.save of a
// torch.jit.script or trace) loaded from bytes onto a model's device and run
// at a hook point, and a plan's fn ops bound to their functions and extra
// tensors. The functions model.fn_load keeps for a model: fn_set.h.
#pragma once

#include <ATen/core/Dict.h>
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <chrono>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>
#include <zmq.hpp>

#include "base/status.h"
#include "hooks/spec.h"
#include "model/modeld/interventions/fn_set.h"

namespace gpubox::modeld {

// Tensors a function returned to capture, by name.
using FnCaptures = std::vector<std::pair<std::string, at::Tensor>>;

// One loaded function: forward(act) or forward(act, extra: Dict[str, Tensor]),
// returning a Tensor, None, or (Optional[Tensor], Dict[str, Tensor]). Called
// on one model's scheduler thread at a time.
class UserFn : public std::enable_shared_from_this<UserFn> {
 public:
  // invalid_request naming where ("params.ops[0].fn") when bytes are not a
  // TorchScript archive LibTorch can load onto device, or its forward takes other arguments.
  static Result<std::shared_ptr<const UserFn>> load(std::string_view bytes, c10::Device device, const std::string& where);
  ~UserFn();

  struct Output {
    at::Tensor replacement;  // undefined: the activation stays as it is
    FnCaptures captures;
  };
  // Runs on act, on a thread of its own (FnRunner) while this one waits,
  // asking stop every few milliseconds whether the call may go on. Status:
  // invalid_request with TorchScript's message when it raised or returned
  // something else than the forms above (the caller adds the op and hook);
  // resource_exhausted when the device ran out of memory; stop's status, or
  // deadline_exceeded past kCallLimit, when it did not end in time (it is then
  // abandoned: this returns, the model's other work goes on).
  Result<Output> call(const at::Tensor& act, const c10::Dict<std::string, at::Tensor>& extra,
                      const std::function<Status()>& stop = {}) const;
  static constexpr std::chrono::seconds kCallLimit{30};
  std::size_t bytes() const { return bytes_; }

 private:
  struct Script;
  UserFn(std::unique_ptr<Script> script, bool takes_extra, std::size_t bytes);
  std::unique_ptr<Script> script_;
  bool takes_extra_;
  std::size_t bytes_;
};

// An fn op's function and extra tensors (on the model's device); empty for other ops.
struct FnBinding {
  std::shared_ptr<const UserFn> fn;
  c10::Dict<std::string, at::Tensor> extra;
};

// What a call's fn ops may name: set's functions as session sees them (fn_set.h).
struct FnScope {
  const FnSet* set = nullptr;  // none: the call names no function
  std::string session;         // "": the call sent none
};

// Binds a call's fn ops: the function named (in scope) or sent (loaded
// from its attachment once per call: loaded remembers it by attachment).
class FnBinder {
 public:
  FnBinder(FnScope scope, const std::vector<zmq::message_t>& attachments, c10::Device device)
      : scope_(std::move(scope)), attachments_(attachments), device_(device) {}
  Result<FnBinding> bind(const hooks::Op& op);
  // One binding per op of plan, in order.
  Result<std::vector<FnBinding>> bind(const hooks::Plan& plan);

 private:
  FnScope scope_;
  const std::vector<zmq::message_t>& attachments_;
  c10::Device device_;
  std::map<std::size_t, std::shared_ptr<const UserFn>> loaded_;
};

}  // namespace gpubox::modeld
