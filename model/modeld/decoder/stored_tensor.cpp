#include "model/modeld/decoder/stored_tensor.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

namespace gpubox::modeld {

Result<at::Tensor> stored_tensor(const weights::SafetensorsFile& file, const weights::TensorEntry& entry) {
  c10::ScalarType type = at::kFloat;
  switch (entry.dtype) {
    case weights::DType::F32: type = at::kFloat; break;
    case weights::DType::F16: type = at::kHalf; break;
    case weights::DType::BF16: type = at::kBFloat16; break;
    default:
      return Status(ErrorCode::invalid_request, fmt::format("{}: tensor {} has dtype {}; expected F32, F16 or BF16", file.path(),
                                                            entry.name, weights::dtype_name(entry.dtype)));
  }
  auto bytes = file.bytes(entry);
  // The mapping is read-only: the view is only read, then copied by the caller.
  return at::from_blob(const_cast<std::byte*>(bytes.data()), entry.shape, at::TensorOptions().dtype(type));
}

}  // namespace gpubox::modeld
