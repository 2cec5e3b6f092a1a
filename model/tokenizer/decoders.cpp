#include "model/tokenizer/decoders.h"

#include "model/tokenizer/byte_level.h"
#include "model/tokenizer/pattern.h"
#include "model/tokenizer/pre_tokenizers.h"
#include "model/tokenizer/utf8.h"

namespace gpubox::tokenizer {
namespace {

class SequenceDecoder : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> parts) : parts_(std::move(parts)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (const auto& p : parts_) p->decode_chain(tokens);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> parts_;
};

// Byte characters back to bytes; a token with any other character keeps its
// own UTF-8. The whole is repaired into one valid string.
class ByteLevelDecoder : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string bytes;
    for (const std::string& t : tokens) {
      std::string mine;
      bool all = true;
      for (char32_t cp : utf8_code_points(t)) {
        auto b = char_to_byte(cp);
        if (!b) {
          all = false;
          break;
        }
        mine += static_cast<char>(*b);
      }
      bytes += all ? mine : t;
    }
    tokens.assign(1, utf8_lossy(bytes));
  }
};

class ReplaceDecoder : public Decoder {
 public:
  ReplaceDecoder(Pattern pattern, std::string content) : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::string& t : tokens) {
      std::string out;
      std::size_t last = 0;
      for (auto [b, e] : pattern_.matches(t)) {
        out.append(t, last, b - last);
        out += content_;
        last = e;
      }
      out.append(t, last, std::string::npos);
      t = std::move(out);
    }
  }

 private:
  Pattern pattern_;
  std::string content_;
};

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// `<0xNN>` tokens back to bytes; a run of them that is not valid UTF-8 becomes
// one U+FFFD per byte.
class ByteFallbackDecoder : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    std::string pending;
    auto flush = [&] {
      if (pending.empty()) return;
      if (utf8_is_valid(pending)) {
        out.push_back(pending);
      } else {
        for (std::size_t i = 0; i < pending.size(); ++i) out.emplace_back("\xEF\xBF\xBD");
      }
      pending.clear();
    };
    for (std::string& t : tokens) {
      int value = -1;
      if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>') {
        int hi = hex_digit(t[3]), lo = hex_digit(t[4]);
        if (hi >= 0 && lo >= 0) value = hi * 16 + lo;
        else if (t[3] == '+' && lo >= 0) value = lo;
      }
      if (value >= 0) {
        pending += static_cast<char>(value);
      } else {
        flush();
        out.push_back(std::move(t));
      }
    }
    flush();
    tokens = std::move(out);
  }
};

class FuseDecoder : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string all;
    for (const std::string& t : tokens) all += t;
    tokens.assign(1, std::move(all));
  }
};

class StripDecoder : public Decoder {
 public:
  StripDecoder(char32_t content, std::size_t start, std::size_t stop) : content_(content), start_(start), stop_(stop) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::string& t : tokens) {
      std::vector<char32_t> chars = utf8_code_points(t);
      std::size_t begin = 0;
      while (begin < start_ && begin < chars.size() && chars[begin] == content_) ++begin;
      std::size_t end = chars.size();
      for (std::size_t i = 0; i < stop_ && end > begin && chars[end - 1] == content_; ++i) --end;
      std::string out;
      for (std::size_t i = begin; i < end; ++i) utf8_append(out, chars[i]);
      t = std::move(out);
    }
  }

 private:
  char32_t content_;
  std::size_t start_, stop_;
};

// The replacement character back to spaces; in the first token it is dropped
// unless the prepend scheme is never.
class MetaspaceDecoder : public Decoder {
 public:
  MetaspaceDecoder(std::string replacement, PrependScheme scheme) : replacement_(std::move(replacement)), scheme_(scheme) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      std::string& t = tokens[i];
      std::string out;
      bool drop = i == 0 && scheme_ != PrependScheme::never;
      for (std::size_t pos = 0; pos < t.size();) {
        if (t.compare(pos, replacement_.size(), replacement_) == 0) {
          if (!drop) out += ' ';
          pos += replacement_.size();
        } else {
          out += t[pos++];
        }
      }
      t = std::move(out);
    }
  }

 private:
  std::string replacement_;
  PrependScheme scheme_;
};

}  // namespace

std::unique_ptr<Decoder> load_decoder(const JsonNode& node) {
  std::string type = node.type();
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Decoder>> parts;
    for (const JsonNode& n : node.at("decoders").elements()) parts.push_back(load_decoder(n));
    return std::make_unique<SequenceDecoder>(std::move(parts));
  }
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "Replace") return std::make_unique<ReplaceDecoder>(Pattern(node.at("pattern")), node.at("content").str());
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Strip") {
    JsonNode c = node.at("content");
    std::string s = c.str();
    if (!utf8_is_valid(s) || utf8_code_points(s).size() != 1) c.fail("expected one character");
    auto count = [&](const char* key) {
      std::int64_t v = node.at(key).integer();
      if (v < 0) node.at(key).fail("expected a count >= 0");
      return static_cast<std::size_t>(v);
    };
    return std::make_unique<StripDecoder>(utf8_code_points(s)[0], count("start"), count("stop"));
  }
  if (type == "Metaspace") return std::make_unique<MetaspaceDecoder>(load_replacement(node), load_prepend_scheme(node));
  node.at("type").fail("decoder \"" + type + "\" is not supported");
}

}  // namespace gpubox::tokenizer
