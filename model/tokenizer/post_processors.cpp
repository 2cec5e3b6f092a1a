#include "model/tokenizer/post_processors.h"

#include <algorithm>
#include <map>

#include "model/tokenizer/unicode.h"
#include "model/tokenizer/utf8.h"

namespace gpubox::tokenizer {
namespace {

class SequenceProcessor : public PostProcessor {
 public:
  explicit SequenceProcessor(std::vector<std::unique_ptr<PostProcessor>> parts) : parts_(std::move(parts)) {}
  void process(std::vector<TokenRecord>& tokens, bool add_special_tokens, std::string_view input) const override {
    for (const auto& p : parts_) p->process(tokens, add_special_tokens, input);
  }

 private:
  std::vector<std::unique_ptr<PostProcessor>> parts_;
};

// With trim_offsets, offsets leave out the spaces (Ġ or whitespace) a token
// starts or ends with, counted in characters of the input as Hugging Face's
// Python encode does; the first token keeps one leading space when
// add_prefix_space put it there.
class ByteLevelProcessor : public PostProcessor {
 public:
  ByteLevelProcessor(bool add_prefix_space, bool trim_offsets) : add_prefix_space_(add_prefix_space), trim_(trim_offsets) {}
  void process(std::vector<TokenRecord>& tokens, bool, std::string_view input) const override {
    if (!trim_) return;
    auto char_length = [&](std::size_t pos) {
      std::size_t n = pos < input.size() ? utf8_valid_length(input, pos) : 1;
      return n == 0 ? 1 : n;
    };
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      TokenRecord& t = tokens[i];
      if (!utf8_is_valid(t.text())) continue;
      std::vector<char32_t> chars = utf8_code_points(t.text());
      auto spacey = [](char32_t c) { return c == 0x120 || is_unicode_whitespace(c); };
      std::size_t leading = 0, trailing = 0;
      while (leading < chars.size() && spacey(chars[leading])) ++leading;
      while (trailing < chars.size() && spacey(chars[chars.size() - 1 - trailing])) ++trailing;
      if (leading > 0) {
        bool is_first = i == 0 || t.offsets.first == 0;
        if (is_first && add_prefix_space_ && leading == 1) leading = 0;
        std::size_t start = t.offsets.first;
        for (std::size_t k = 0; k < leading && start < t.offsets.second; ++k) start += char_length(start);
        t.offsets.first = static_cast<std::uint32_t>(std::min<std::size_t>(start, t.offsets.second));
      }
      if (trailing > 0) {
        // Only when `trailing` characters precede the end, as Hugging Face requires.
        std::size_t end = t.offsets.second, back = 0;
        while (back < trailing && end > 0) {
          std::size_t b = end - 1;
          while (b > 0 && b + 4 > end && (static_cast<unsigned char>(input[b]) & 0xC0) == 0x80) --b;
          end = b;
          ++back;
        }
        if (back == trailing) t.offsets.second = static_cast<std::uint32_t>(std::max<std::size_t>(end, t.offsets.first));
      }
    }
  }

 private:
  bool add_prefix_space_, trim_;
};

// The "single" template: special tokens (offsets (0, 0)) around the sequence.
class TemplateProcessor : public PostProcessor {
 public:
  struct Special {
    std::vector<std::int32_t> ids;
    std::vector<std::string> tokens;
  };
  struct Item {
    bool is_sequence;
    std::string special;  // a key of specials_ when !is_sequence
  };
  TemplateProcessor(std::vector<Item> single, std::map<std::string, Special> specials)
      : single_(std::move(single)), specials_(std::move(specials)) {}
  void process(std::vector<TokenRecord>& tokens, bool add_special_tokens, std::string_view) const override {
    if (!add_special_tokens) return;
    std::vector<TokenRecord> out;
    for (const Item& item : single_) {
      if (item.is_sequence) {
        out.insert(out.end(), tokens.begin(), tokens.end());
        continue;
      }
      const Special& s = specials_.at(item.special);
      for (std::size_t i = 0; i < s.ids.size(); ++i) out.push_back({s.ids[i], {0, 0}, &s.tokens[i], {}});
    }
    tokens = std::move(out);
  }

 private:
  std::vector<Item> single_;
  std::map<std::string, Special> specials_;
};

std::unique_ptr<PostProcessor> load_template(const JsonNode& node) {
  std::map<std::string, TemplateProcessor::Special> specials;
  if (auto map = node.get("special_tokens")) {
    for (auto& [key, value] : map->members()) {
      TemplateProcessor::Special s;
      for (const JsonNode& id : value.at("ids").elements()) s.ids.push_back(id.id());
      for (const JsonNode& t : value.at("tokens").elements()) s.tokens.push_back(t.str());
      if (s.ids.size() != s.tokens.size()) value.fail("ids and tokens differ in length");
      specials.emplace(key, std::move(s));
    }
  }
  std::vector<TemplateProcessor::Item> single;
  JsonNode items = node.at("single");
  if (items.is_string()) items.fail("a template as a string is not supported; expected a list of pieces");
  for (const JsonNode& item : items.elements()) {
    if (auto seq = item.get("Sequence")) {
      if (seq->at("id").str() != "A") seq->at("id").fail("the single template may only hold sequence \"A\"");
      single.push_back({true, ""});
    } else if (auto sp = item.get("SpecialToken")) {
      std::string id = sp->at("id").str();
      if (!specials.count(id)) sp->at("id").fail("special token \"" + id + "\" is not in special_tokens");
      single.push_back({false, id});
    } else {
      item.fail("expected {\"Sequence\": ...} or {\"SpecialToken\": ...}");
    }
  }
  return std::make_unique<TemplateProcessor>(std::move(single), std::move(specials));
}

}  // namespace

std::unique_ptr<PostProcessor> load_post_processor(const JsonNode& node) {
  std::string type = node.type();
  if (type == "Sequence") {
    std::vector<std::unique_ptr<PostProcessor>> parts;
    for (const JsonNode& n : node.at("processors").elements()) parts.push_back(load_post_processor(n));
    return std::make_unique<SequenceProcessor>(std::move(parts));
  }
  if (type == "ByteLevel")
    return std::make_unique<ByteLevelProcessor>(node.opt_bool("add_prefix_space", true), node.opt_bool("trim_offsets", true));
  if (type == "TemplateProcessing") return load_template(node);
  node.at("type").fail("post_processor \"" + type + "\" is not supported (ByteLevel, TemplateProcessing, Sequence are)");
}

}  // namespace gpubox::tokenizer
