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
  std::map<std::string, double> gpu_hour;      // per GPU of that type (as the priced backend names them: H100, A100-80GB, ...)
  double cpu_core_hour = 0;                    // per requested CPU core
  double memory_gib_hour = 0;                  // per GiB of requested memory
  double egress_gib = 0;                       // per GiB sent out (a model pull's reservation)
  double create = 0;                           // once per sandbox created (boot, image pull)
  std::optional<double> default_cpu_cores;     // what a create without --cpu is charged for
  std::optional<double> default_memory_gib;    // what a create without --memory is charged for
  std::string source;                          // where the user read the figures (free text)

  nlohmann::json to_json() const;
  // The form to_json writes, its numbers bounded as parse_prices bounds them; invalid_request naming the field.
  static Result<Prices> from_json(const nlohmann::json& json);
};

// A prices file: `KEY = NUMBER` lines, `#` comments, blank lines; keys
// gpu_hour.TYPE, cpu_core_hour, memory_gib_hour, egress_gib, create,
// default_cpu_cores, default_memory_gib, and `source = TEXT`. Every number is
// decimal, >= 0 and at most kMaxPrice. invalid_request naming the line and key
// of the first problem (an unknown or repeated key; a negative, hex, inf, NaN,
// missing or too large number, with the value and the bound).
Result<Prices> parse_prices(const std::string& text);

// The bound of every number of a prices file (USD per hour, per GiB, per create; cores and GiB
// of the defaults): far above any real price, and low enough that a reservation's arithmetic
// stays exact (host/budget/amounts.h).
inline constexpr double kMaxPrice = 1e6;

// The biggest file parse_prices reads (a prices file is a few dozen lines).
inline constexpr std::size_t kMaxPricesFileBytes = 64 * 1024;

}  // namespace gpubox::host::budget
