// Prices: what a budget charges, as the user wrote them in a prices file
// (docs/budget.md, docs/budget_prices.sample). gpubox hard-codes no price:
// every figure comes from the user, who reads it from the provider's own
// pricing page. Plain data and a pure parser; any thread.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "base/status.h"

namespace gpubox::host::budget {

// USD, per hour unless the name says otherwise.
struct Prices {
  std::map<std::string, double> gpu_hour;      // per GPU of that type (Modal's names: H100, A100-80GB, ...)
  double cpu_core_hour = 0;                    // per requested CPU core
  double memory_gib_hour = 0;                  // per GiB of requested memory
  double egress_gib = 0;                       // per GiB sent out (a model pull's reservation)
  double create = 0;                           // once per sandbox created (boot, image pull)
  std::optional<double> default_cpu_cores;     // what a create without --cpu is charged for
  std::optional<double> default_memory_gib;    // what a create without --memory is charged for
  std::string source;                          // where the user read the figures (free text)

  nlohmann::json to_json() const;
  // The form to_json writes; invalid_request naming the field.
  static Result<Prices> from_json(const nlohmann::json& json);
};

// A prices file: `KEY = NUMBER` lines, `#` comments, blank lines; keys
// gpu_hour.TYPE, cpu_core_hour, memory_gib_hour, egress_gib, create,
// default_cpu_cores, default_memory_gib, and `source = TEXT`. Every price is
// a finite number >= 0. invalid_request naming the line and key of the
// first problem (an unknown or repeated key, a negative, NaN or missing number).
Result<Prices> parse_prices(const std::string& text);

// The biggest file parse_prices reads (a prices file is a few dozen lines).
inline constexpr std::size_t kMaxPricesFileBytes = 64 * 1024;

}  // namespace gpubox::host::budget
