#include "model/modeld/interventions/load_cap.h"

#include <fmt/format.h>

namespace gpubox::modeld {

Status LoadCap::admits(std::size_t held_count, std::size_t held_bytes, std::size_t adding) const {
  std::string cap = fmt::format("{} {} and {} per model", count, what, byte_size(bytes));
  std::string room = fmt::format("{} one ({} lists them) to make room", unload, list);
  if (held_count >= count) {
    return {ErrorCode::resource_exhausted, fmt::format("this model holds {} {}: the cap is {}; {}", held_count, what, cap, room)};
  }
  if (adding > bytes || held_bytes > bytes - adding) {
    return {ErrorCode::resource_exhausted, fmt::format("this model holds {} of {}; {} more would pass the cap of {}; {}",
                                                       byte_size(held_bytes), what, byte_size(adding), cap, room)};
  }
  return {};
}

LoadCap function_cap() { return {"functions", 256, std::size_t{1} << 30, "model.fn_unload", "model.fns"}; }

LoadCap sae_cap() { return {"SAEs", 64, std::size_t{32} << 30, "model.sae_unload", "model.saes"}; }

std::string byte_size(std::size_t bytes) {
  constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB"};
  if (bytes < 1024) return fmt::format("{} bytes", bytes);
  double value = static_cast<double>(bytes) / 1024;
  std::size_t unit = 0;
  while (value >= 1024 && unit + 1 < std::size(kUnits)) {
    value /= 1024;
    ++unit;
  }
  return fmt::format("{:.{}f} {}", value, value == static_cast<double>(static_cast<std::size_t>(value)) ? 0 : 1, kUnits[unit]);
}

}  // namespace gpubox::modeld
