#include "model/tokenizer/added_vocabulary.h"

#include "model/tokenizer/unicode.h"
#include "model/tokenizer/utf8.h"

namespace gpubox::tokenizer {
namespace {

// The first or last code point of valid UTF-8 text.
char32_t first_char(const std::string& s, std::size_t pos) {
  return utf8_decode(s, pos, utf8_lead_length(static_cast<unsigned char>(s[pos])));
}
char32_t last_char(const std::string& s, std::size_t end) {
  std::size_t b = end - 1;
  while (b > 0 && (static_cast<unsigned char>(s[b]) & 0xC0) == 0x80) --b;
  return utf8_decode(s, b, end - b);
}
bool is_word_char(char32_t c) { return is_unicode_word_char(c); }

}  // namespace

void MatchTrie::add(const std::string& pattern, std::size_t index) {
  if (pattern.empty()) return;
  std::uint32_t node = 0;
  for (char c : pattern) {
    auto byte = static_cast<unsigned char>(c);
    std::uint64_t key = (static_cast<std::uint64_t>(node) << 8) | byte;
    auto it = edges_.find(key);
    if (it == edges_.end()) {
      auto child = static_cast<std::uint32_t>(terminal_.size());
      terminal_.push_back(-1);
      it = edges_.emplace(key, child).first;
    }
    node = it->second;
  }
  first_byte_[static_cast<unsigned char>(pattern[0])] = true;
  // The first pattern added wins among equal ones.
  if (terminal_[node] < 0) terminal_[node] = static_cast<std::int64_t>(index);
}

std::optional<std::pair<std::size_t, std::size_t>> MatchTrie::longest_at(const std::string& text, std::size_t pos) const {
  if (!first_byte_[static_cast<unsigned char>(text[pos])]) return std::nullopt;
  std::optional<std::pair<std::size_t, std::size_t>> best;
  std::uint32_t node = 0;
  for (std::size_t i = pos; i < text.size(); ++i) {
    auto it = edges_.find((static_cast<std::uint64_t>(node) << 8) | static_cast<unsigned char>(text[i]));
    if (it == edges_.end()) break;
    node = it->second;
    if (terminal_[node] >= 0) best = std::pair{i + 1 - pos, static_cast<std::size_t>(terminal_[node])};
  }
  return best;
}

AddedVocabulary::AddedVocabulary(std::vector<AddedToken> tokens, const std::vector<std::string>& normalized_contents)
    : tokens_(std::move(tokens)) {
  // Special tokens are matched before the others of equal content, as in Hugging Face.
  for (int pass = 0; pass < 2; ++pass) {
    for (std::size_t i = 0; i < tokens_.size(); ++i) {
      const AddedToken& t = tokens_[i];
      if (t.special != (pass == 0)) continue;
      if (t.normalized) {
        normalized_trie_.add(normalized_contents[i], i);
      } else {
        raw_trie_.add(t.content, i);
      }
    }
  }
  for (const AddedToken& t : tokens_) {
    by_content_.emplace(t.content, t.id);
    by_id_.emplace(t.id, t.content);
    if (t.special) special_.insert(t.content);
  }
}

std::optional<std::int32_t> AddedVocabulary::token_to_id(const std::string& content) const {
  auto it = by_content_.find(content);
  if (it == by_content_.end()) return std::nullopt;
  return it->second;
}

const std::string* AddedVocabulary::id_to_token(std::int32_t id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &it->second;
}

std::vector<AddedSplit> AddedVocabulary::split(const std::string& text, bool normalized) const {
  const MatchTrie& trie = normalized ? normalized_trie_ : raw_trie_;
  std::vector<AddedSplit> out;
  if (text.empty()) return out;
  if (trie.empty()) {
    out.push_back({std::nullopt, 0, text.size()});
    return out;
  }
  std::size_t start_offset = 0;
  std::size_t pos = 0;
  while (pos < text.size()) {
    auto match = trie.longest_at(text, pos);
    if (!match) {
      ++pos;
      continue;
    }
    std::size_t start = pos, stop = pos + match->first;
    pos = stop;
    const AddedToken& token = tokens_[match->second];
    if (token.single_word) {
      bool start_space = start == 0 || !is_word_char(last_char(text, start));
      bool stop_space = stop == text.size() || !is_word_char(first_char(text, stop));
      if (!start_space || !stop_space) continue;
    }
    if (token.lstrip) {
      std::size_t s = start;
      while (s > 0) {
        std::size_t b = s - 1;
        while (b > 0 && (static_cast<unsigned char>(text[b]) & 0xC0) == 0x80) --b;
        if (!is_unicode_whitespace(utf8_decode(text, b, s - b))) break;
        s = b;
      }
      start = std::max(s, start_offset);
    }
    if (token.rstrip) {
      while (stop < text.size()) {
        std::size_t n = utf8_lead_length(static_cast<unsigned char>(text[stop]));
        if (!is_unicode_whitespace(utf8_decode(text, stop, n))) break;
        stop += n;
      }
    }
    if (start_offset < start) out.push_back({std::nullopt, start_offset, start});
    out.push_back({token.id, start, stop});
    start_offset = stop;
  }
  if (start_offset < text.size()) out.push_back({std::nullopt, start_offset, text.size()});
  return out;
}

}  // namespace gpubox::tokenizer
