// AddedVocabulary: the added_tokens of a tokenizer.json and how they cut the
// input before the model sees it (leftmost-longest match; single_word, lstrip,
// rstrip; normalized tokens are matched in normalized text). Immutable after load.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace gpubox::tokenizer {

struct AddedToken {
  std::string content;
  std::int32_t id = 0;
  bool single_word = false, lstrip = false, rstrip = false, normalized = false, special = false;
};

// A byte trie over a set of strings, for leftmost-longest matching.
class MatchTrie {
 public:
  void add(const std::string& pattern, std::size_t index);
  // The longest pattern that starts at text[pos]: (length, index), or nullopt.
  std::optional<std::pair<std::size_t, std::size_t>> longest_at(const std::string& text, std::size_t pos) const;
  bool empty() const { return terminal_.size() <= 1; }

 private:
  std::unordered_map<std::uint64_t, std::uint32_t> edges_;  // (node << 8 | byte) -> child
  std::vector<std::int64_t> terminal_{-1};                   // pattern index per node, -1: none
  bool first_byte_[256] = {};
};

// One piece of a split: an added token's id, or nullopt for text to tokenize.
struct AddedSplit {
  std::optional<std::int32_t> id;
  std::size_t begin, end;
};

class AddedVocabulary {
 public:
  // `tokens` with final ids; `normalized_contents[i]` is tokens[i].content after the normalizer.
  AddedVocabulary(std::vector<AddedToken> tokens, const std::vector<std::string>& normalized_contents);

  // Splits `text` on the non-normalized (normalized == false) or the normalized tokens.
  std::vector<AddedSplit> split(const std::string& text, bool normalized) const;

  std::optional<std::int32_t> token_to_id(const std::string& content) const;
  const std::string* id_to_token(std::int32_t id) const;
  bool is_special(const std::string& content) const { return special_.count(content) > 0; }
  const std::vector<AddedToken>& tokens() const { return tokens_; }

 private:
  std::vector<AddedToken> tokens_;
  std::unordered_map<std::string, std::int32_t> by_content_;
  std::unordered_map<std::int32_t, std::string> by_id_;
  std::unordered_set<std::string> special_;
  MatchTrie raw_trie_, normalized_trie_;
};

}  // namespace gpubox::tokenizer
