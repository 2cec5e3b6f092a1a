// Tensors on the wire: a descriptor in the msgpack body ({"dtype", "shape",
// "attachment": index}) and the raw bytes as one attachment frame that
// borrows the tensor's memory (no copy for a contiguous CPU tensor).
#pragma once

#include <ATen/core/Tensor.h>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>
#include <zmq.hpp>

#include "hooks/tensor_arg.h"
#include "base/status.h"

namespace gpubox::modeld {

// Appends tensor (moved to the CPU, made contiguous) to attachments; returns its descriptor.
nlohmann::json tensor_to_wire(const at::Tensor& tensor, std::vector<zmq::message_t>& attachments);

// A tensor a caller sent (decode_tensor_arg checked frame's size against arg), copied out of the frame onto device.
at::Tensor tensor_from_wire(const hooks::TensorArg& arg, const zmq::message_t& frame, c10::Device device);

// The bytes of each frame, as hooks::check_finite reads them (valid while the frames live).
std::vector<std::string_view> byte_views(const std::vector<zmq::message_t>& frames);

// "float32", "bfloat16", "float16", "int64", "int32", "bool".
std::string dtype_wire_name(c10::ScalarType type);
// The model dtypes a request may ask for: float32, bfloat16, float16.
Result<c10::ScalarType> model_dtype_from_name(const std::string& name);

}  // namespace gpubox::modeld
