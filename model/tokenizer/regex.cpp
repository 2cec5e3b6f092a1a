#include "model/tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "model/tokenizer/utf8.h"

namespace gpubox::tokenizer {
namespace {

constexpr const char* kWhiteSpaceSet = "\\t\\n\\x{0B}\\f\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}";

// Oniguruma's \w as Hugging Face's build matches it: letters, marks, Nd, Nl,
// Pc and the circled letters, plus the Latin-1 numbers outside a bracket class
// but not inside one (PCRE2's \w under UCP differs).
constexpr const char* kWordSet =
    "\\p{L}\\p{M}\\p{Nd}\\p{Nl}\\p{Pc}\\x{24B6}-\\x{24E9}\\x{1F130}-\\x{1F149}\\x{1F150}-\\x{1F169}\\x{1F170}-\\x{1F189}";
constexpr const char* kLatin1Numbers = "\\x{B2}\\x{B3}\\x{B9}\\x{BC}-\\x{BE}";

// A JIT stack per thread, larger than PCRE2's 32 KiB default so that long
// whitespace runs do not exhaust it.
pcre2_jit_stack* thread_jit_stack() {
  struct Holder {
    pcre2_jit_stack* stack = pcre2_jit_stack_create(64 * 1024, 8 * 1024 * 1024, nullptr);
    ~Holder() { pcre2_jit_stack_free(stack); }
  };
  thread_local Holder holder;
  return holder.stack;
}

}  // namespace

struct Regex::Impl {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Impl() { pcre2_code_free(code); }
};

std::string translate_oniguruma(const std::string& pattern) {
  std::string out;
  bool in_class = false;
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      char n = pattern[i + 1];
      if (n == 's') {
        out += in_class ? std::string(kWhiteSpaceSet) : "[" + std::string(kWhiteSpaceSet) + "]";
      } else if (n == 'S' && !in_class) {
        out += "[^" + std::string(kWhiteSpaceSet) + "]";
      } else if (n == 'w') {
        out += in_class ? std::string(kWordSet) : "[" + std::string(kWordSet) + kLatin1Numbers + "]";
      } else if (n == 'W' && !in_class) {
        out += "[^" + std::string(kWordSet) + kLatin1Numbers + "]";
      } else if (n == 'h') {
        out += in_class ? "0-9a-fA-F" : "[0-9a-fA-F]";
      } else if (n == 'H' && !in_class) {
        out += "[^0-9a-fA-F]";
      } else {
        out += c;
        out += n;
      }
      ++i;
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
      out += c;
      // A ']' or '^]' right after the opening bracket is literal.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];
      continue;
    }
    if (c == ']' && in_class) in_class = false;
    out += c;
  }
  return out;
}

std::unique_ptr<Regex> Regex::compile(const std::string& pattern, std::string* error) {
  std::string translated = translate_oniguruma(pattern);
  int code = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* compiled = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                                       PCRE2_UTF | PCRE2_UCP, &code, &offset, nullptr);
  if (!compiled) {
    PCRE2_UCHAR buffer[256];
    pcre2_get_error_message(code, buffer, sizeof buffer);
    *error = "regex " + pattern + " does not compile: " + reinterpret_cast<const char*>(buffer) + " at offset " +
             std::to_string(offset);
    return nullptr;
  }
  std::unique_ptr<Regex> regex(new Regex());
  regex->impl_ = std::make_unique<Impl>();
  regex->impl_->code = compiled;
  regex->impl_->jit = pcre2_jit_compile(compiled, PCRE2_JIT_COMPLETE) == 0;
  return regex;
}

Regex::~Regex() = default;

std::vector<std::pair<std::size_t, std::size_t>> Regex::find_all(std::string_view text) const {
  std::vector<std::pair<std::size_t, std::size_t>> matches;
  pcre2_match_data* data = pcre2_match_data_create_from_pattern(impl_->code, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  if (impl_->jit) pcre2_jit_stack_assign(context, nullptr, thread_jit_stack());
  auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  std::size_t pos = 0;
  while (pos <= text.size()) {
    int rc = pcre2_match(impl_->code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK, data, context);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
      rc = pcre2_match(impl_->code, subject, text.size(), pos, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, data, context);
    }
    if (rc < 0) break;
    PCRE2_SIZE* ov = pcre2_get_ovector_pointer(data);
    std::size_t b = ov[0], e = ov[1];
    if (e < b) break;  // \K tricks; not used by tokenizers
    matches.emplace_back(b, e);
    if (e > b) {
      pos = e;
    } else {
      if (e >= text.size()) break;
      pos = e + utf8_lead_length(static_cast<unsigned char>(text[e]));
    }
  }
  pcre2_match_context_free(context);
  pcre2_match_data_free(data);
  return matches;
}

}  // namespace gpubox::tokenizer
