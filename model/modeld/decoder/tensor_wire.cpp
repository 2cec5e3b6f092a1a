#include "model/modeld/decoder/tensor_wire.h"

#include <ATen/ATen.h>

namespace gpubox::modeld {

std::vector<std::string_view> byte_views(const std::vector<zmq::message_t>& frames) {
  std::vector<std::string_view> views;
  for (const auto& frame : frames) views.emplace_back(static_cast<const char*>(frame.data()), frame.size());
  return views;
}

std::string dtype_wire_name(c10::ScalarType type) {
  switch (type) {
    case at::kFloat: return "float32";
    case at::kBFloat16: return "bfloat16";
    case at::kHalf: return "float16";
    case at::kLong: return "int64";
    case at::kInt: return "int32";
    case at::kBool: return "bool";
    default: return c10::toString(type);
  }
}

Result<c10::ScalarType> model_dtype_from_name(const std::string& name) {
  if (name == "float32") return at::kFloat;
  if (name == "bfloat16") return at::kBFloat16;
  if (name == "float16") return at::kHalf;
  return Status(ErrorCode::invalid_request, "dtype \"" + name + "\" is not one of float32, bfloat16, float16");
}

nlohmann::json tensor_to_wire(const at::Tensor& tensor, std::vector<zmq::message_t>& attachments) {
  auto* held = new at::Tensor(tensor.to(at::kCPU).contiguous());
  std::size_t bytes = held->nbytes();
  nlohmann::json descriptor = {{"dtype", dtype_wire_name(held->scalar_type())},
                               {"shape", held->sizes().vec()},
                               {"attachment", attachments.size()}};
  // The frame borrows the tensor's storage; ZeroMQ frees the tensor once sent.
  attachments.emplace_back(held->data_ptr(), bytes, [](void*, void* hint) { delete static_cast<at::Tensor*>(hint); }, held);
  return descriptor;
}

at::Tensor tensor_from_wire(const hooks::TensorArg& arg, const zmq::message_t& frame, c10::Device device) {
  c10::ScalarType dtype = arg.dtype == hooks::WireDtype::float16    ? at::kHalf
                          : arg.dtype == hooks::WireDtype::bfloat16 ? at::kBFloat16
                                                                   : at::kFloat;
  // from_blob needs a non-const pointer; the tensor is only read, then copied.
  void* data = const_cast<void*>(frame.data());
  return at::from_blob(data, arg.shape, at::TensorOptions().dtype(dtype)).to(device, false, /*copy=*/true);
}

}  // namespace gpubox::modeld
