#include "kernel/json_writer.h"

#include <cstdint>
#include <cstring>

namespace gpubox::kernel {
namespace {

using nlohmann::json;

// Length of the well-formed UTF-8 sequence at s[i] (RFC 3629), or the length of
// its maximal ill-formed subpart negated (at least 1), as Unicode defines it.
long utf8_sequence(std::string_view s, size_t i) {
  auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  unsigned char c = byte(i);
  size_t need;
  unsigned char lo = 0x80, hi = 0xBF;  // the second byte's range
  if (c >= 0xC2 && c <= 0xDF) {
    need = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    need = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    need = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return -1;
  }
  for (size_t k = 1; k < need; ++k) {
    if (i + k >= s.size()) return -static_cast<long>(k);
    unsigned char b = byte(i + k);
    bool ok = k == 1 ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xBF);
    if (!ok) return -static_cast<long>(k);
  }
  return static_cast<long>(need);
}

void append_string(std::string& out, std::string_view s, json::error_handler_t handler) {
  static const char hex[] = "0123456789abcdef";
  out += '"';
  size_t run = 0;  // start of the bytes not yet copied
  size_t i = 0;
  while (i < s.size()) {
    // Eight plain bytes at a time (none below 0x20, none '"' or '\\', none non-ASCII).
    while (i + 8 <= s.size()) {
      uint64_t x;
      std::memcpy(&x, s.data() + i, 8);
      constexpr uint64_t ones = 0x0101010101010101ull, highs = 0x8080808080808080ull;
      auto has_zero = [](uint64_t v) { return (v - ones) & ~v & highs; };
      uint64_t special = ((x - ones * 0x20) & ~x) | has_zero(x ^ (ones * '"')) | has_zero(x ^ (ones * '\\')) | x;
      if (special & highs) break;
      i += 8;
    }
    if (i >= s.size()) break;
    auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c != '"' && c != '\\' && c < 0x80) {
      ++i;
      continue;
    }
    if (c >= 0x80) {
      long n = utf8_sequence(s, i);
      if (n > 0) {
        i += static_cast<size_t>(n);
        continue;
      }
      if (handler == json::error_handler_t::strict) {
        json(std::string(s)).dump(-1, ' ', false, handler);  // throws nlohmann's own error
      }
      out.append(s.data() + run, i - run);
      if (handler == json::error_handler_t::replace) out += "\xEF\xBF\xBD";
      i += static_cast<size_t>(-n);
      run = i;
      continue;
    }
    out.append(s.data() + run, i - run);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        out += "\\u00";
        out += hex[c >> 4];
        out += hex[c & 15];
    }
    ++i;
    run = i;
  }
  out.append(s.data() + run, s.size() - run);
  out += '"';
}

}  // namespace

void append_json(std::string& out, const json& value, json::error_handler_t handler) {
  switch (value.type()) {
    case json::value_t::object: {
      out += '{';
      bool first = true;
      for (auto item = value.begin(); item != value.end(); ++item) {
        if (!first) out += ',';
        first = false;
        append_string(out, item.key(), handler);
        out += ':';
        append_json(out, item.value(), handler);
      }
      out += '}';
      break;
    }
    case json::value_t::array: {
      out += '[';
      bool first = true;
      for (const auto& item : value) {
        if (!first) out += ',';
        first = false;
        append_json(out, item, handler);
      }
      out += ']';
      break;
    }
    case json::value_t::string:
      append_string(out, value.get_ref<const std::string&>(), handler);
      break;
    default:  // numbers, booleans, null, binary: short, nlohmann's own form
      out += value.dump(-1, ' ', false, handler);
  }
}

}  // namespace gpubox::kernel
