// Amounts: money and GPU-hours as integers of millionths (micro-USD, micro
// GPU-hours), the one place a double becomes an amount (range-checked) and
// amounts are added (checked, or held at the int64 bounds). Pure; any thread.
#pragma once

#include <cstdint>
#include <optional>

namespace gpubox::host::budget {

// The largest amount: 1e18 millionths, $1e12 (the largest ceiling --max-usd takes).
inline constexpr std::int64_t kMaxMicro = 1'000'000'000'000'000'000;

// value (USD or GPU-hours) in millionths, rounded up; nullopt when it is not
// finite, negative, or beyond kMaxMicro.
std::optional<std::int64_t> micro_of(double value);

// a + b; nullopt where the sum overflows int64.
std::optional<std::int64_t> checked_add(std::int64_t a, std::int64_t b);

// a + b and a - b, held at INT64_MAX or INT64_MIN where they would overflow.
std::int64_t saturating_add(std::int64_t a, std::int64_t b);
std::int64_t saturating_sub(std::int64_t a, std::int64_t b);

}  // namespace gpubox::host::budget
