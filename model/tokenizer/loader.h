// The parts of a loaded tokenizer and the two halves of the pipeline that do
// not belong to one component: loading them from JSON, and running the
// added-token split, normalizer, pre-tokenizer and model over a text.
#pragma once

#include <memory>
#include <string_view>
#include <vector>

#include "model/tokenizer/added_vocabulary.h"
#include "model/tokenizer/bpe.h"
#include "model/tokenizer/decoders.h"
#include "model/tokenizer/normalizers.h"
#include "model/tokenizer/post_processors.h"
#include "model/tokenizer/pre_tokenizers.h"
#include "model/tokenizer/tokenizer.h"

namespace gpubox::tokenizer {

// What a Tokenizer is made of; immutable after load_parts().
struct TokenizerParts {
  std::unique_ptr<Normalizer> normalizer;        // may be null
  std::unique_ptr<PreTokenizer> pre_tokenizer;   // may be null
  std::unique_ptr<Bpe> model;
  std::unique_ptr<PostProcessor> post_processor; // may be null
  std::unique_ptr<Decoder> decoder;              // may be null
  std::unique_ptr<AddedVocabulary> added;
  std::size_t vocab_size = 0;
};

// Throws LoadError or nlohmann::json::exception.
std::unique_ptr<TokenizerParts> load_parts(std::string_view json_text);
// Everything encode() does before the post-processor.
std::vector<TokenRecord> encode_records(const TokenizerParts& parts, std::string_view text);

}  // namespace gpubox::tokenizer
