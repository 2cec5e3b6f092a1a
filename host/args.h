// Args: a command's arguments split into options and positionals, as the
// CLI parses them (host/cli/cli.h, parse_args) and as backends read the
// `gpubox create` flags only they take (host/backends/backend.h). Plain data; any thread.
#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace gpubox::host {

// Options are "--name VALUE" / "--name=VALUE" (repeatable) or flags; "--"
// ends options and the rest goes to `command`. With parse_args's stop_after >
// 0, the positional after the first stop_after ones starts `command` too (exec ID CMD ARGS…).
struct Args {
  std::vector<std::string> positional;
  std::vector<std::string> command;
  bool has_double_dash = false;
  std::map<std::string, std::vector<std::string>> values;
  std::set<std::string> flags;

  std::optional<std::string> last(const std::string& option) const;
  const std::vector<std::string>& all(const std::string& option) const;
  bool flag(const std::string& option) const { return flags.count(option) > 0; }
};

// A number from text: nullopt unless it is all of it, finite and within [min, max].
std::optional<double> parse_number(const std::string& text, double min, double max);

}  // namespace gpubox::host
