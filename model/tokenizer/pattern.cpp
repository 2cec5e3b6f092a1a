#include "model/tokenizer/pattern.h"

namespace gpubox::tokenizer {

Pattern::Pattern(const JsonNode& node) {
  if (auto s = node.get("String")) {
    literal_ = s->str();
    if (literal_.empty()) s->fail("an empty String pattern is not supported");
  } else if (auto r = node.get("Regex")) {
    std::string error;
    auto regex = Regex::compile(r->str(), &error);
    if (!regex) r->fail(error);
    regex_ = std::move(regex);
  } else {
    node.fail("expected {\"String\": ...} or {\"Regex\": ...}");
  }
}

std::vector<std::pair<std::size_t, std::size_t>> Pattern::matches(const std::string& text) const {
  if (regex_) return regex_->find_all(text);
  std::vector<std::pair<std::size_t, std::size_t>> out;
  for (std::size_t pos = text.find(literal_); pos != std::string::npos; pos = text.find(literal_, pos + literal_.size()))
    out.emplace_back(pos, pos + literal_.size());
  return out;
}

std::vector<PatternPiece> Pattern::find_matches(const std::string& text) const {
  std::vector<PatternPiece> out;
  if (text.empty()) return out;
  std::size_t prev = 0;
  for (auto [b, e] : matches(text)) {
    if (prev != b) out.push_back({prev, b, false});
    out.push_back({b, e, true});
    prev = e;
  }
  if (prev != text.size()) out.push_back({prev, text.size(), false});
  return out;
}

}  // namespace gpubox::tokenizer
