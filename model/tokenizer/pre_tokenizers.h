// Pre-tokenizers of a tokenizer.json: Sequence, Split, ByteLevel, Metaspace.
// Others are refused at load. Immutable after load; thread-safe.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "model/tokenizer/json_reader.h"
#include "model/tokenizer/normalized_text.h"

namespace gpubox::tokenizer {

// Cuts (and may rewrite) pieces of normalized text before the model sees them.
class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces `pieces` by their finer pieces; empty pieces are dropped.
  virtual void pre_tokenize(std::vector<NormalizedText>& pieces) const = 0;
};

// Reads a "pre_tokenizer" object; throws LoadError for what is not supported.
std::unique_ptr<PreTokenizer> load_pre_tokenizer(const JsonNode& node);

// How Metaspace puts a replacement character at the start of a piece.
enum class PrependScheme { always, first, never };
PrependScheme load_prepend_scheme(const JsonNode& node);
// The one-character "replacement" of a Metaspace component.
std::string load_replacement(const JsonNode& node);

}  // namespace gpubox::tokenizer
