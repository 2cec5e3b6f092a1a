#include "model/tokenizer/normalized_text.h"

#include "model/tokenizer/unicode.h"
#include "model/tokenizer/utf8.h"

namespace gpubox::tokenizer {

NormalizedText NormalizedText::from_original(const std::string& whole, std::size_t begin, std::size_t end,
                                             const std::vector<Span>* origin) {
  NormalizedText t;
  t.text = whole.substr(begin, end - begin);
  t.align.reserve(t.text.size());
  for (std::size_t i = begin; i < end;) {
    std::size_t n = utf8_lead_length(static_cast<unsigned char>(whole[i]));
    Span s{static_cast<std::uint32_t>(i), static_cast<std::uint32_t>(i + n)};
    if (origin) s = {(*origin)[i].first, (*origin)[i + n - 1].second};
    t.align.insert(t.align.end(), n, s);
    i += n;
  }
  t.original_begin = t.align.empty() ? static_cast<std::uint32_t>(origin && begin < origin->size() ? (*origin)[begin].first : begin)
                                     : t.align.front().first;
  return t;
}

NormalizedText NormalizedText::slice(std::size_t begin, std::size_t end) const {
  NormalizedText t;
  t.text = text.substr(begin, end - begin);
  t.align.assign(align.begin() + static_cast<std::ptrdiff_t>(begin), align.begin() + static_cast<std::ptrdiff_t>(end));
  t.original_begin = begin < align.size() ? align[begin].first : (align.empty() ? original_begin : align.back().second);
  return t;
}

Span NormalizedText::original_span(std::size_t begin, std::size_t end) const {
  if (begin >= end || begin >= align.size()) {
    std::uint32_t at = begin < align.size() ? align[begin].first : (align.empty() ? original_begin : align.back().second);
    return {at, at};
  }
  return {align[begin].first, align[end - 1].second};
}

void NormalizedText::replace(const std::vector<std::pair<std::size_t, std::size_t>>& matches, const std::string& content) {
  if (matches.empty()) return;
  std::string out;
  std::vector<Span> out_align;
  out.reserve(text.size());
  out_align.reserve(text.size());
  std::size_t last = 0;
  for (auto [b, e] : matches) {
    out.append(text, last, b - last);
    out_align.insert(out_align.end(), align.begin() + static_cast<std::ptrdiff_t>(last),
                     align.begin() + static_cast<std::ptrdiff_t>(b));
    Span s = e > 0 ? align[e - 1] : Span{0, 0};
    out += content;
    out_align.insert(out_align.end(), content.size(), s);
    last = e;
  }
  out.append(text, last, std::string::npos);
  out_align.insert(out_align.end(), align.begin() + static_cast<std::ptrdiff_t>(last), align.end());
  text = std::move(out);
  align = std::move(out_align);
}

void NormalizedText::prepend(const std::string& prefix) {
  if (text.empty()) return;
  text.insert(0, prefix);
  align.insert(align.begin(), prefix.size(), align.front());
}

void NormalizedText::nfc() {
  // Code points below U+0300 are NFC-stable and never compose with what precedes them.
  bool simple = true;
  for (char c : text) {
    if (static_cast<unsigned char>(c) >= 0xCC) {
      simple = false;
      break;
    }
  }
  if (simple) return;
  std::vector<char32_t> cps;
  std::vector<std::size_t> starts;
  for (std::size_t i = 0; i < text.size();) {
    std::size_t n = utf8_lead_length(static_cast<unsigned char>(text[i]));
    cps.push_back(utf8_decode(text, i, n));
    starts.push_back(i);
    i += n;
  }
  std::vector<TaggedCodePoint> composed = nfc_tagged(cps);
  std::string out;
  std::vector<Span> out_align;
  std::size_t cursor = 0;  // the next input character
  for (const TaggedCodePoint& c : composed) {
    Span s{0, 0};
    if (c.change > 0) {
      if (cursor > 0) s = align[starts[cursor - 1]];
    } else {
      if (cursor < starts.size()) s = align[starts[cursor]];
      cursor += 1 + static_cast<std::size_t>(-c.change);
    }
    std::size_t from = out.size();
    utf8_append(out, c.cp);
    out_align.insert(out_align.end(), out.size() - from, s);
  }
  text = std::move(out);
  align = std::move(out_align);
}

}  // namespace gpubox::tokenizer
