// Post-processors of a tokenizer.json: ByteLevel (offset trimming),
// TemplateProcessing (special tokens around a single sequence), Sequence.
// Others are refused at load. Immutable after load; thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "model/tokenizer/json_reader.h"
#include "model/tokenizer/normalized_text.h"

namespace gpubox::tokenizer {

// One token of an encoding being built.
struct TokenRecord {
  std::int32_t id;
  Span offsets;
  const std::string* token;  // its string, owned by the tokenizer; null: `own`
  std::string own;           // the matched text of an added token that differs from its content

  const std::string& text() const { return token ? *token : own; }
};

// Adjusts a whole encoding: special tokens around it, offset trimming.
class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  // `input` is the text given to encode (the offsets point into it).
  virtual void process(std::vector<TokenRecord>& tokens, bool add_special_tokens, std::string_view input) const = 0;
};

// Reads a "post_processor" object; throws LoadError for what is not supported.
std::unique_ptr<PostProcessor> load_post_processor(const JsonNode& node);

}  // namespace gpubox::tokenizer
