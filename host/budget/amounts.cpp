#include "host/budget/amounts.h"

#include <cmath>
#include <limits>

namespace gpubox::host::budget {

std::optional<std::int64_t> micro_of(double value) {
  if (!std::isfinite(value) || value < 0) return std::nullopt;
  double micro = std::ceil(value * 1e6 - 1e-6);
  // Compared as doubles before any cast: a double beyond int64's range has no integer to cast to.
  if (micro > static_cast<double>(kMaxMicro)) return std::nullopt;
  return micro < 0 ? 0 : static_cast<std::int64_t>(micro);
}

std::optional<std::int64_t> checked_add(std::int64_t a, std::int64_t b) {
  std::int64_t sum = 0;
  if (__builtin_add_overflow(a, b, &sum)) return std::nullopt;
  return sum;
}

std::int64_t saturating_add(std::int64_t a, std::int64_t b) {
  std::int64_t sum = 0;
  if (!__builtin_add_overflow(a, b, &sum)) return sum;
  return b > 0 ? std::numeric_limits<std::int64_t>::max() : std::numeric_limits<std::int64_t>::min();
}

std::int64_t saturating_sub(std::int64_t a, std::int64_t b) {
  std::int64_t difference = 0;
  if (!__builtin_sub_overflow(a, b, &difference)) return difference;
  return b < 0 ? std::numeric_limits<std::int64_t>::max() : std::numeric_limits<std::int64_t>::min();
}

}  // namespace gpubox::host::budget
