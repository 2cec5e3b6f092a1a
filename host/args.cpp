#include "host/args.h"

#include <cmath>
#include <exception>

namespace gpubox::host {

std::optional<std::string> Args::last(const std::string& option) const {
  auto found = values.find(option);
  if (found == values.end() || found->second.empty()) return std::nullopt;
  return found->second.back();
}

const std::vector<std::string>& Args::all(const std::string& option) const {
  static const std::vector<std::string> kNone;
  auto found = values.find(option);
  return found == values.end() ? kNone : found->second;
}

std::optional<double> parse_number(const std::string& text, double min, double max) {
  try {
    size_t used = 0;
    double value = std::stod(text, &used);
    if (used != text.size() || !std::isfinite(value) || value < min || value > max) return std::nullopt;
    return value;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

}  // namespace gpubox::host
