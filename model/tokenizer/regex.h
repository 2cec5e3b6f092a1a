// Regex: a PCRE2 pattern (UTF, UCP, JIT when available) written in the
// Oniguruma dialect Hugging Face's tokenizer.json files use. Immutable after
// construction; find_all may be called from any thread.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace gpubox::tokenizer {

class Regex {
 public:
  // nullptr and `error` set when the pattern does not compile.
  static std::unique_ptr<Regex> compile(const std::string& pattern, std::string* error);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Non-overlapping matches [begin, end) from left to right, as Oniguruma's
  // search loop finds them (after an empty match the search moves one
  // character on). REQUIRES: text is valid UTF-8.
  std::vector<std::pair<std::size_t, std::size_t>> find_all(std::string_view text) const;

 private:
  Regex() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Rewrites Oniguruma escapes whose PCRE2 meaning differs: \s, \S become the
// White_Space set (PCRE2's \s under UCP lacks U+0085); \w, \W Oniguruma's
// word characters; \h, \H hexadecimal digits. \b and \B keep PCRE2's meaning.
std::string translate_oniguruma(const std::string& pattern);

}  // namespace gpubox::tokenizer
