#include "model/tokenizer/utf8.h"

namespace gpubox::tokenizer {
namespace {

// Length of the maximal prefix at pos that could start a valid sequence
// (the "maximal subpart" of Unicode's U+FFFD substitution practice); at least 1.
std::size_t invalid_subpart_length(std::string_view text, std::size_t pos) {
  auto b = [&](std::size_t i) { return static_cast<unsigned char>(text[i]); };
  unsigned char lead = b(pos);
  std::size_t need = 0;
  unsigned char lo = 0x80, hi = 0xBF;
  if (lead >= 0xC2 && lead <= 0xDF) {
    need = 1;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    need = 2;
    if (lead == 0xE0) lo = 0xA0;
    if (lead == 0xED) hi = 0x9F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    need = 3;
    if (lead == 0xF0) lo = 0x90;
    if (lead == 0xF4) hi = 0x8F;
  } else {
    return 1;
  }
  std::size_t i = 1;
  for (; i <= need && pos + i < text.size(); ++i) {
    unsigned char c = b(pos + i);
    if (i == 1 ? (c < lo || c > hi) : (c < 0x80 || c > 0xBF)) break;
  }
  return i;
}

}  // namespace

std::size_t utf8_valid_length(std::string_view text, std::size_t pos) {
  auto lead = static_cast<unsigned char>(text[pos]);
  if (lead < 0x80) return 1;
  std::size_t n = invalid_subpart_length(text, pos);
  std::size_t want = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : 2;
  return n == want ? n : 0;
}

char32_t utf8_decode(std::string_view text, std::size_t pos, std::size_t len) {
  auto b = [&](std::size_t i) { return static_cast<char32_t>(static_cast<unsigned char>(text[pos + i])); };
  switch (len) {
    case 1: return b(0);
    case 2: return ((b(0) & 0x1F) << 6) | (b(1) & 0x3F);
    case 3: return ((b(0) & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F);
    default: return ((b(0) & 0x07) << 18) | ((b(1) & 0x3F) << 12) | ((b(2) & 0x3F) << 6) | (b(3) & 0x3F);
  }
}

void utf8_append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::vector<char32_t> utf8_code_points(std::string_view valid) {
  std::vector<char32_t> out;
  out.reserve(valid.size());
  for (std::size_t i = 0; i < valid.size();) {
    std::size_t n = utf8_lead_length(static_cast<unsigned char>(valid[i]));
    out.push_back(utf8_decode(valid, i, n));
    i += n;
  }
  return out;
}

bool utf8_is_valid(std::string_view bytes) {
  for (std::size_t i = 0; i < bytes.size();) {
    std::size_t n = utf8_valid_length(bytes, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string utf8_lossy(std::string_view bytes, std::vector<std::pair<std::uint32_t, std::uint32_t>>* origin) {
  std::string out;
  out.reserve(bytes.size());
  for (std::size_t i = 0; i < bytes.size();) {
    std::size_t n = utf8_valid_length(bytes, i);
    std::size_t from = out.size();
    std::size_t consumed = n;
    if (n == 0) {
      consumed = invalid_subpart_length(bytes, i);
      out += "\xEF\xBF\xBD";
    } else {
      out.append(bytes.substr(i, n));
    }
    if (origin) {
      for (std::size_t k = from; k < out.size(); ++k)
        origin->emplace_back(static_cast<std::uint32_t>(i), static_cast<std::uint32_t>(i + consumed));
    }
    i += consumed;
  }
  return out;
}

}  // namespace gpubox::tokenizer
