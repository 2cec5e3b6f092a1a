// gpubox::tokenizer: Hugging Face tokenizer.json files (BPE models) loaded
// natively, encoding and decoding exactly like the `tokenizers` library.
// README.md in this folder lists what is supported and what is refused.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace gpubox::tokenizer {

struct Encoding {
  std::vector<std::int32_t> ids;
  std::vector<std::pair<std::size_t, std::size_t>> offsets;  // byte offsets [begin,end) into the input text, one per id
};

struct TokenizerParts;

// One loaded tokenizer.json; immutable and thread-safe after load.
class Tokenizer {
 public:
  // A malformed or unsupported file gives invalid_request naming `source_name`
  // and the JSON path of the problem; nothing throws.
  static Result<std::unique_ptr<Tokenizer>> from_json(std::string_view json_text, std::string_view source_name);
  static Result<std::unique_ptr<Tokenizer>> from_file(const std::string& path);
  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // Invalid UTF-8 in `text` is read as U+FFFD per maximal invalid subpart (as
  // Rust's from_utf8_lossy does); offsets still point into `text` itself.
  Encoding encode(std::string_view text, bool add_special_tokens = true) const;
  // Ids that are neither in the vocab nor added tokens are skipped, as Hugging Face does.
  std::string decode(std::span<const std::int32_t> ids, bool skip_special_tokens = false) const;
  std::size_t vocab_size() const;  // including added tokens
  std::optional<std::int32_t> token_to_id(std::string_view token) const;
  std::optional<std::string> id_to_token(std::int32_t id) const;

 private:
  Tokenizer();
  std::unique_ptr<TokenizerParts> parts_;
};

}  // namespace gpubox::tokenizer
