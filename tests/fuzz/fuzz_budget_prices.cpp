// The prices-file parser (host/budget/prices.h): a file the user gives.
// A parsed file has only finite numbers from 0 to kMaxPrice (no hex, inf or nan
// got through), and survives its JSON round trip.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

#include "host/budget/prices.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);  // NOLINT: bytes as chars
  auto prices = gpubox::host::budget::parse_prices(text);
  if (!prices) return 0;
  auto bad = [](double value) { return !std::isfinite(value) || value < 0 || value > gpubox::host::budget::kMaxPrice; };
  if (bad(prices->cpu_core_hour) || bad(prices->memory_gib_hour) || bad(prices->egress_gib) || bad(prices->create)) __builtin_trap();
  for (const auto& [type, price] : prices->gpu_hour) {
    if (type.empty() || bad(price)) __builtin_trap();
  }
  for (const auto& amount : {prices->default_cpu_cores, prices->default_memory_gib}) {
    if (amount && bad(*amount)) __builtin_trap();
  }
  auto again = gpubox::host::budget::Prices::from_json(prices->to_json());
  if (!again || again->gpu_hour != prices->gpu_hour || again->create != prices->create) __builtin_trap();
  return 0;
}
