// Pattern: the {"String": s} or {"Regex": r} of a tokenizer.json component,
// cutting text into matched and unmatched ranges. Immutable after load.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "model/tokenizer/json_reader.h"
#include "model/tokenizer/regex.h"

namespace gpubox::tokenizer {

struct PatternPiece {
  std::size_t begin, end;
  bool is_match;
};

class Pattern {
 public:
  explicit Pattern(const JsonNode& node);  // throws LoadError
  static Pattern literal(std::string text) { return Pattern(std::move(text)); }

  // Covers all of `text` with ranges in order (none for empty text).
  std::vector<PatternPiece> find_matches(const std::string& text) const;
  // Only the matched ranges.
  std::vector<std::pair<std::size_t, std::size_t>> matches(const std::string& text) const;

 private:
  explicit Pattern(std::string literal) : literal_(std::move(literal)) {}
  std::string literal_;
  std::shared_ptr<const Regex> regex_;  // null: literal_
};

}  // namespace gpubox::tokenizer
