#include "model/tokenizer/normalizers.h"

#include <vector>

#include "model/tokenizer/pattern.h"

namespace gpubox::tokenizer {
namespace {

class SequenceNormalizer : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> parts) : parts_(std::move(parts)) {}
  void normalize(NormalizedText& text) const override {
    for (const auto& p : parts_) p->normalize(text);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> parts_;
};

class PrependNormalizer : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prefix) : prefix_(std::move(prefix)) {}
  void normalize(NormalizedText& text) const override { text.prepend(prefix_); }

 private:
  std::string prefix_;
};

class ReplaceNormalizer : public Normalizer {
 public:
  ReplaceNormalizer(Pattern pattern, std::string content) : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void normalize(NormalizedText& text) const override { text.replace(pattern_.matches(text.text), content_); }

 private:
  Pattern pattern_;
  std::string content_;
};

class NfcNormalizer : public Normalizer {
 public:
  void normalize(NormalizedText& text) const override { text.nfc(); }
};

}  // namespace

std::unique_ptr<Normalizer> load_normalizer(const JsonNode& node) {
  std::string type = node.type();
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Normalizer>> parts;
    for (const JsonNode& n : node.at("normalizers").elements()) parts.push_back(load_normalizer(n));
    return std::make_unique<SequenceNormalizer>(std::move(parts));
  }
  if (type == "Prepend") return std::make_unique<PrependNormalizer>(node.at("prepend").str());
  if (type == "Replace") return std::make_unique<ReplaceNormalizer>(Pattern(node.at("pattern")), node.at("content").str());
  if (type == "NFC") return std::make_unique<NfcNormalizer>();
  node.at("type").fail("normalizer \"" + type + "\" is not supported (Sequence, Prepend, Replace, NFC are)");
}

}  // namespace gpubox::tokenizer
