#include "model/weights/tensor_entry.h"

namespace gpubox::weights {

std::uint64_t TensorEntry::element_count() const {
  std::uint64_t count = 1;
  for (auto dim : shape) count *= static_cast<std::uint64_t>(dim);
  return count;
}

}  // namespace gpubox::weights
