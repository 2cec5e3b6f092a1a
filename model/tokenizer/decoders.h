// Decoders of a tokenizer.json: ByteLevel, Replace, ByteFallback, Fuse, Strip,
// Metaspace, Sequence. Others are refused at load. Immutable; thread-safe.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "model/tokenizer/json_reader.h"

namespace gpubox::tokenizer {

// One step of turning token strings back into text.
class Decoder {
 public:
  virtual ~Decoder() = default;
  // Rewrites the token strings; the decoded text is their concatenation.
  virtual void decode_chain(std::vector<std::string>& tokens) const = 0;
};

// Reads a "decoder" object; throws LoadError for what is not supported.
std::unique_ptr<Decoder> load_decoder(const JsonNode& node);

}  // namespace gpubox::tokenizer
