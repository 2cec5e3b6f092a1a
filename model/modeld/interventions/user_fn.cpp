#include "model/modeld/interventions/user_fn.h"

#include <ATen/ThreadLocalState.h>
#include <c10/util/Exception.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <exception>
#include <sstream>
#include <torch/csrc/jit/runtime/jit_exception.h>
#include <torch/csrc/jit/serialization/import.h>

#include "model/modeld/interventions/fn_runner.h"
#include "model/modeld/decoder/tensor_wire.h"
#include "model/tokenizer/utf8.h"

namespace gpubox::modeld {
namespace {

// LibTorch's message made fit for an error: the first part (a traceback per frame can run to pages) as
// valid UTF-8 (a corrupted archive's names are its bytes, and a message goes out as a msgpack string).
std::string shortened(std::string_view message) {
  constexpr std::size_t kMost = 2000;
  while (!message.empty() && (message.back() == '\n' || message.back() == ' ')) message.remove_suffix(1);
  bool cut = message.size() > kMost;
  std::string out = tokenizer::utf8_lossy(message.substr(0, kMost));  // a sequence cut in two is repaired too
  return cut ? out + " [...]" : out;
}

bool is_tensor_dict(const c10::TypePtr& type) {
  auto dict = type->cast<c10::DictType>();
  return dict && dict->getKeyType()->kind() == c10::TypeKind::StringType &&
         dict->getValueType()->kind() == c10::TypeKind::TensorType;
}

}  // namespace

struct UserFn::Script {
  mutable torch::jit::Module module;
};

UserFn::UserFn(std::unique_ptr<Script> script, bool takes_extra, std::size_t bytes)
    : script_(std::move(script)), takes_extra_(takes_extra), bytes_(bytes) {}

UserFn::~UserFn() = default;

Result<std::shared_ptr<const UserFn>> UserFn::load(std::string_view bytes, c10::Device device, const std::string& where) {
  auto script = std::make_unique<Script>();
  std::string failure;
  try {
    std::istringstream in{std::string(bytes)};
    script->module = torch::jit::load(in, device);
    script->module.eval();
  } catch (const c10::Error& e) {
    failure = e.what_without_backtrace();
  } catch (const std::exception& e) {
    failure = e.what();
  }
  if (!failure.empty()) {
    return Status::invalid_request(fmt::format("{}: not a TorchScript archive LibTorch can load (torch.jit.save of torch.jit.script "
                               "or torch.jit.trace): {}", where, shortened(failure)));
  }
  auto forward = script->module.find_method("forward");
  if (!forward) return Status::invalid_request(where + ": the TorchScript archive has no forward function");
  const auto& arguments = forward->function().getSchema().arguments();  // self, then the function's own
  std::size_t own = arguments.empty() ? 0 : arguments.size() - 1;
  bool fits = (own == 1 || own == 2) && arguments[1].type()->kind() == c10::TypeKind::TensorType &&
              (own == 1 || is_tensor_dict(arguments[2].type()));
  if (!fits) {
    std::vector<std::string> types;
    for (std::size_t i = 1; i < arguments.size(); ++i) types.push_back(arguments[i].type()->str());
    return Status::invalid_request(fmt::format("{}: the function takes ({}); an fn takes (act: Tensor) or "
                               "(act: Tensor, extra: Dict[str, Tensor])", where, fmt::join(types, ", ")));
  }
  return std::shared_ptr<const UserFn>(new UserFn(std::move(script), own == 2, bytes.size()));
}

Result<UserFn::Output> UserFn::call(const at::Tensor& act, const c10::Dict<std::string, at::Tensor>& extra,
                                     const std::function<Status()>& stop) const {
  // What the function's thread needs, owned by it: abandoned, it outlives this call.
  struct Call {
    std::shared_ptr<const UserFn> fn;
    std::vector<c10::IValue> inputs;
    at::ThreadLocalState state;  // this thread's grad and inference modes, and the like
    c10::IValue returned;
    Status failure;
  };
  auto run = std::make_shared<Call>();
  run->fn = shared_from_this();
  run->inputs = {act};
  if (takes_extra_) run->inputs.emplace_back(extra);
  static thread_local FnRunner runner;
  Status ended = runner.run(
      [run] {
        at::ThreadLocalStateGuard as_caller(run->state);
        try {
          run->returned = run->fn->script_->module.forward(std::move(run->inputs));
        } catch (const c10::OutOfMemoryError& e) {
          run->failure = Status(ErrorCode::resource_exhausted, "out of memory on the device: " + shortened(e.what_without_backtrace()));
        } catch (const c10::Error& e) {
          run->failure = Status::invalid_request(shortened(e.what_without_backtrace()));
        } catch (const std::exception& e) {  // torch::jit::JITException: the function's own raise
          run->failure = Status::invalid_request(shortened(e.what()));
        }
      },
      stop, kCallLimit);
  if (!ended) {
    return Status(ended.code(), fmt::format("it did not return in time ({}); it was abandoned, still running on a "
                                            "thread of its own at the least CPU priority, and the model's other calls went on",
                                            ended.message()));
  }
  if (!run->failure) return run->failure;
  const c10::IValue& returned = run->returned;
  Output out;
  c10::IValue replacement = returned;
  if (returned.isTuple()) {
    const auto& parts = returned.toTupleRef().elements();
    if (parts.size() != 2 || !parts[1].isGenericDict()) {
      return Status::invalid_request("returned a tuple that is not (Optional[Tensor], Dict[str, Tensor])");
    }
    replacement = parts[0];
    for (const auto& item : parts[1].toGenericDict()) {
      if (!item.key().isString() || !item.value().isTensor()) {
        return Status::invalid_request("returned captures that are not a Dict[str, Tensor]");
      }
      out.captures.emplace_back(item.key().toStringRef(), item.value().toTensor());
    }
  }
  if (replacement.isTensor()) {
    out.replacement = replacement.toTensor();
  } else if (!replacement.isNone()) {
    return Status::invalid_request(fmt::format("returned {}; an fn returns a Tensor, None or (Optional[Tensor], Dict[str, Tensor])",
                                   replacement.tagKind()));
  }
  return out;
}

Result<FnBinding> FnBinder::bind(const hooks::Op& op) {
  FnBinding out;
  if (op.kind != hooks::OpKind::fn) return out;
  std::string where = fmt::format("params.ops[{}].fn", op.index);
  if (op.fn_attachment) {
    auto& loaded = loaded_[*op.fn_attachment];
    if (!loaded) {
      const zmq::message_t& frame = attachments_.at(*op.fn_attachment);
      auto fn = UserFn::load(std::string_view(static_cast<const char*>(frame.data()), frame.size()), device_, where);
      if (!fn) return fn.status();
      loaded = *fn;
    }
    out.fn = loaded;
  } else {
    if (!scope_.set) return Status::invalid_request(fmt::format("{}: no function \"{}\" (this call names none)", where, op.fn_name));
    auto fn = scope_.set->find(op.fn_name, scope_.session, where);
    if (!fn) return fn.status();
    out.fn = *fn;
  }
  for (const auto& [name, arg] : op.extra) out.extra.insert(name, tensor_from_wire(arg, attachments_.at(arg.attachment), device_));
  return out;
}

Result<std::vector<FnBinding>> FnBinder::bind(const hooks::Plan& plan) {
  std::vector<FnBinding> out;
  for (const auto& op : plan.ops) {
    auto bound = bind(op);
    if (!bound) return bound.status();
    out.push_back(std::move(*bound));
  }
  return out;
}

}  // namespace gpubox::modeld
