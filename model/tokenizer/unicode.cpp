#include "model/tokenizer/unicode.h"

#include <utf8proc.h>

#include <algorithm>

namespace gpubox::tokenizer {
namespace {

int combining_class(char32_t cp) {
  return utf8proc_get_property(static_cast<utf8proc_int32_t>(cp))->combining_class;
}

// The primary composite of a starter and a following character, or 0.
char32_t compose_pair(char32_t starter, char32_t next) {
  utf8proc_int32_t buffer[2] = {static_cast<utf8proc_int32_t>(starter), static_cast<utf8proc_int32_t>(next)};
  utf8proc_ssize_t n = utf8proc_normalize_utf32(buffer, 2, UTF8PROC_COMPOSE);
  return n == 1 ? static_cast<char32_t>(buffer[0]) : 0;
}

}  // namespace

bool is_unicode_whitespace(char32_t cp) {
  switch (cp) {
    case 0x20: case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029:
    case 0x202F: case 0x205F: case 0x3000:
      return true;
    default:
      return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x2000 && cp <= 0x200A);
  }
}

bool is_unicode_word_char(char32_t cp) {
  if (cp == 0x200C || cp == 0x200D) return true;
  // Circled and squared letters: symbols with the Alphabetic property.
  if ((cp >= 0x24B6 && cp <= 0x24E9) || (cp >= 0x1F130 && cp <= 0x1F149) || (cp >= 0x1F150 && cp <= 0x1F169) ||
      (cp >= 0x1F170 && cp <= 0x1F189))
    return true;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME: case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_PC:
      return true;
    default:
      return false;
  }
}

std::vector<TaggedCodePoint> nfc_tagged(const std::vector<char32_t>& input) {
  std::vector<TaggedCodePoint> seq;
  seq.reserve(input.size());
  for (std::size_t i = 0; i < input.size(); ++i) {
    utf8proc_int32_t buffer[32];
    int boundclass = 0;
    utf8proc_ssize_t n = utf8proc_decompose_char(static_cast<utf8proc_int32_t>(input[i]), buffer, 32,
                                                 UTF8PROC_DECOMPOSE, &boundclass);
    if (n <= 0 || n > 32) {
      seq.push_back({input[i], 0});
      continue;
    }
    for (utf8proc_ssize_t k = 0; k < n; ++k) seq.push_back({static_cast<char32_t>(buffer[k]), k == 0 ? 0 : 1});
  }
  // Canonical ordering: a stable sort of each run of non-starters by class.
  for (std::size_t i = 0; i < seq.size();) {
    if (combining_class(seq[i].cp) == 0) {
      ++i;
      continue;
    }
    std::size_t j = i;
    while (j < seq.size() && combining_class(seq[j].cp) != 0) ++j;
    std::stable_sort(seq.begin() + static_cast<std::ptrdiff_t>(i), seq.begin() + static_cast<std::ptrdiff_t>(j),
                     [](const TaggedCodePoint& a, const TaggedCodePoint& b) {
                       return combining_class(a.cp) < combining_class(b.cp);
                     });
    i = j;
  }
  // Canonical composition.
  std::vector<TaggedCodePoint> out;
  out.reserve(seq.size());
  std::ptrdiff_t starter = -1;
  int last_class = -1;  // class of the last character kept after the starter; -1: none
  for (const TaggedCodePoint& c : seq) {
    int cls = combining_class(c.cp);
    if (starter >= 0) {
      bool blocked = last_class != -1 && (last_class == 0 || last_class >= cls);
      if (!blocked) {
        char32_t composite = compose_pair(out[static_cast<std::size_t>(starter)].cp, c.cp);
        if (composite != 0) {
          out[static_cast<std::size_t>(starter)].cp = composite;
          out[static_cast<std::size_t>(starter)].change += c.change - 1;
          continue;
        }
      }
    }
    out.push_back(c);
    if (cls == 0) {
      starter = static_cast<std::ptrdiff_t>(out.size()) - 1;
      last_class = -1;
    } else {
      last_class = cls;
    }
  }
  return out;
}

}  // namespace gpubox::tokenizer
