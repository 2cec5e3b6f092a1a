// Normalizers of a tokenizer.json: Sequence, Prepend, Replace, NFC. Others are
// refused at load. Immutable after load; normalize() is thread-safe.
#pragma once

#include <memory>

#include "model/tokenizer/json_reader.h"
#include "model/tokenizer/normalized_text.h"

namespace gpubox::tokenizer {

// One normalization step over a piece of text, keeping its alignments.
class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void normalize(NormalizedText& text) const = 0;
};

// Reads a "normalizer" object; throws LoadError for what is not supported.
std::unique_ptr<Normalizer> load_normalizer(const JsonNode& node);

}  // namespace gpubox::tokenizer
