#include "model/tokenizer/pre_tokenizers.h"

#include "model/tokenizer/byte_level.h"
#include "model/tokenizer/pattern.h"
#include "model/tokenizer/utf8.h"

namespace gpubox::tokenizer {
namespace {

enum class Behavior { removed, isolated, merged_with_previous, merged_with_next, contiguous };

// Cuts `text` by `pattern` the way a SplitDelimiterBehavior says, appending non-empty pieces.
void split_into(const NormalizedText& text, const Pattern& pattern, Behavior behavior, bool invert,
                std::vector<NormalizedText>& out) {
  std::vector<PatternPiece> pieces = pattern.find_matches(text.text);
  if (invert)
    for (auto& p : pieces) p.is_match = !p.is_match;
  struct Cut {
    std::size_t begin, end;
    bool remove;
  };
  std::vector<Cut> cuts;
  bool previous_match = false;
  switch (behavior) {
    case Behavior::isolated:
      for (auto& p : pieces) cuts.push_back({p.begin, p.end, false});
      break;
    case Behavior::removed:
      for (auto& p : pieces) cuts.push_back({p.begin, p.end, p.is_match});
      break;
    case Behavior::contiguous:
      for (auto& p : pieces) {
        if (p.is_match == previous_match && !cuts.empty()) cuts.back().end = p.end;
        else cuts.push_back({p.begin, p.end, false});
        previous_match = p.is_match;
      }
      break;
    case Behavior::merged_with_previous:
      for (auto& p : pieces) {
        if (p.is_match && !previous_match && !cuts.empty()) cuts.back().end = p.end;
        else cuts.push_back({p.begin, p.end, false});
        previous_match = p.is_match;
      }
      break;
    case Behavior::merged_with_next:
      for (auto it = pieces.rbegin(); it != pieces.rend(); ++it) {
        if (it->is_match && !previous_match && !cuts.empty()) cuts.back().begin = it->begin;
        else cuts.push_back({it->begin, it->end, false});
        previous_match = it->is_match;
      }
      std::reverse(cuts.begin(), cuts.end());
      break;
  }
  for (const Cut& c : cuts)
    if (!c.remove && c.end > c.begin) out.push_back(text.slice(c.begin, c.end));
}

Behavior load_behavior(const JsonNode& node) {
  std::string b = node.str();
  if (b == "Removed") return Behavior::removed;
  if (b == "Isolated") return Behavior::isolated;
  if (b == "MergedWithPrevious") return Behavior::merged_with_previous;
  if (b == "MergedWithNext") return Behavior::merged_with_next;
  if (b == "Contiguous") return Behavior::contiguous;
  node.fail("unknown split behavior \"" + b + "\"");
}

class SequencePreTokenizer : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> parts) : parts_(std::move(parts)) {}
  void pre_tokenize(std::vector<NormalizedText>& pieces) const override {
    for (const auto& p : parts_) p->pre_tokenize(pieces);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> parts_;
};

class SplitPreTokenizer : public PreTokenizer {
 public:
  SplitPreTokenizer(Pattern pattern, Behavior behavior, bool invert)
      : pattern_(std::move(pattern)), behavior_(behavior), invert_(invert) {}
  void pre_tokenize(std::vector<NormalizedText>& pieces) const override {
    std::vector<NormalizedText> out;
    for (const auto& p : pieces) split_into(p, pattern_, behavior_, invert_, out);
    pieces = std::move(out);
  }

 private:
  Pattern pattern_;
  Behavior behavior_;
  bool invert_;
};

constexpr const char* kGpt2Pattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

class ByteLevelPreTokenizer : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, bool use_regex)
      : add_prefix_space_(add_prefix_space), use_regex_(use_regex), regex_(gpt2_regex()) {}
  void pre_tokenize(std::vector<NormalizedText>& pieces) const override {
    std::vector<NormalizedText> out;
    for (auto& p : pieces) {
      if (add_prefix_space_ && p.text.compare(0, 1, " ") != 0) p.prepend(" ");
      if (use_regex_) split_into(p, regex_, Behavior::isolated, false, out);
      else if (!p.text.empty()) out.push_back(std::move(p));
    }
    for (auto& p : out) {
      p.map_chars([](std::string_view ch, std::string& dst) {
        for (char c : ch) dst += byte_to_utf8(static_cast<unsigned char>(c));
      });
    }
    pieces = std::move(out);
  }

 private:
  static const Pattern& gpt2_regex() {
    static const Pattern pattern = [] {
      nlohmann::json j = {{"Regex", kGpt2Pattern}};
      return Pattern(JsonNode(j, "ByteLevel"));
    }();
    return pattern;
  }
  bool add_prefix_space_, use_regex_;
  const Pattern& regex_;
};

class MetaspacePreTokenizer : public PreTokenizer {
 public:
  MetaspacePreTokenizer(std::string replacement, PrependScheme scheme, bool split)
      : replacement_(replacement), scheme_(scheme), split_(split), space_(Pattern::literal(" ")),
        marker_(Pattern::literal(replacement)) {}
  void pre_tokenize(std::vector<NormalizedText>& pieces) const override {
    std::vector<NormalizedText> out;
    for (auto& p : pieces) {
      p.replace(space_.matches(p.text), replacement_);
      bool starts = p.text.compare(0, replacement_.size(), replacement_) == 0;
      if (!starts && (scheme_ == PrependScheme::always || (scheme_ == PrependScheme::first && p.original_begin == 0)))
        p.prepend(replacement_);
      if (split_) split_into(p, marker_, Behavior::merged_with_next, false, out);
      else if (!p.text.empty()) out.push_back(std::move(p));
    }
    pieces = std::move(out);
  }

 private:
  std::string replacement_;
  PrependScheme scheme_;
  bool split_;
  Pattern space_, marker_;
};

}  // namespace

PrependScheme load_prepend_scheme(const JsonNode& node) {
  if (auto scheme = node.get("prepend_scheme")) {
    std::string s = scheme->str();
    if (s == "always") return PrependScheme::always;
    if (s == "first") return PrependScheme::first;
    if (s == "never") return PrependScheme::never;
    scheme->fail("unknown prepend_scheme \"" + s + "\"");
  }
  return node.opt_bool("add_prefix_space", true) ? PrependScheme::always : PrependScheme::never;
}

std::string load_replacement(const JsonNode& node) {
  JsonNode r = node.at("replacement");
  std::string s = r.str();
  if (s.empty() || !utf8_is_valid(s) || utf8_code_points(s).size() != 1) r.fail("expected one character");
  return s;
}

std::unique_ptr<PreTokenizer> load_pre_tokenizer(const JsonNode& node) {
  std::string type = node.type();
  if (type == "Sequence") {
    std::vector<std::unique_ptr<PreTokenizer>> parts;
    for (const JsonNode& n : node.at("pretokenizers").elements()) parts.push_back(load_pre_tokenizer(n));
    return std::make_unique<SequencePreTokenizer>(std::move(parts));
  }
  if (type == "Split") {
    return std::make_unique<SplitPreTokenizer>(Pattern(node.at("pattern")), load_behavior(node.at("behavior")),
                                               node.opt_bool("invert", false));
  }
  if (type == "ByteLevel") {
    return std::make_unique<ByteLevelPreTokenizer>(node.opt_bool("add_prefix_space", true),
                                                   node.opt_bool("use_regex", true));
  }
  if (type == "Metaspace") {
    return std::make_unique<MetaspacePreTokenizer>(load_replacement(node), load_prepend_scheme(node),
                                                   node.opt_bool("split", true));
  }
  node.at("type").fail("pre_tokenizer \"" + type + "\" is not supported (Sequence, Split, ByteLevel, Metaspace are)");
}

}  // namespace gpubox::tokenizer
