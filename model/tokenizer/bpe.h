// Bpe: the byte-pair-encoding model of a tokenizer.json (vocab, ranked
// merges, unk, byte fallback, ignore_merges), turning one pre-token into ids.
// Immutable after load except for its word cache; tokenize() is thread-safe.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/thread_annotations.h"
#include "model/tokenizer/json_reader.h"

namespace gpubox::tokenizer {

struct ModelToken {
  std::int32_t id;
  std::uint32_t begin, end;  // byte range in the pre-token
};

class Bpe {
 public:
  // Reads the "model" object; throws LoadError.
  explicit Bpe(const JsonNode& model);
  Bpe(const Bpe&) = delete;
  Bpe& operator=(const Bpe&) = delete;

  void tokenize(std::string_view word, std::vector<ModelToken>& out) const EXCLUDES(cache_mutex_);

  std::optional<std::int32_t> token_to_id(std::string_view token) const;
  const std::string* id_to_token(std::int32_t id) const;
  std::size_t vocab_size() const { return vocab_.size(); }
  const std::unordered_map<std::string, std::int32_t>& vocab() const { return vocab_; }

 private:
  struct Merge {
    std::int32_t rank;
    std::int32_t new_id;
  };
  static std::uint64_t pair_key(std::int32_t a, std::int32_t b) {
    return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) | static_cast<std::uint32_t>(b);
  }
  void merge_word(std::string_view word, std::vector<ModelToken>& out) const;

  std::unordered_map<std::string, std::int32_t> vocab_;
  std::unordered_map<std::int32_t, std::string> vocab_r_;
  std::unordered_map<std::uint64_t, Merge> merges_;
  std::optional<std::int32_t> unk_id_;
  std::string prefix_;  // continuing_subword_prefix
  std::string suffix_;  // end_of_word_suffix
  bool has_prefix_ = false, has_suffix_ = false;
  bool fuse_unk_ = false, byte_fallback_ = false, ignore_merges_ = false;
  std::array<std::int32_t, 256> byte_ids_{};  // <0xNN> tokens; -1 when absent

  static constexpr std::size_t kCacheCapacity = 10000;
  static constexpr std::size_t kCacheWordLength = 256;
  mutable SharedMutex cache_mutex_;  // readers look words up, a writer adds one
  mutable std::unordered_map<std::string, std::vector<ModelToken>> cache_ GUARDED_BY(cache_mutex_);
};

}  // namespace gpubox::tokenizer
