// Fuzzes model/tokenizer's loader with the input as a tokenizer.json; what
// loads must encode and decode a few strings (valid and invalid UTF-8) with
// one offset per id inside the text and valid UTF-8 out of decode.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "model/tokenizer/tokenizer.h"
#include "model/tokenizer/utf8.h"

namespace {

void check(bool holds) {
  if (!holds) std::abort();
}

constexpr std::string_view kTexts[] = {
    "",
    "Hello world, it's 2024! <s> <|endoftext|> ab abc",
    "  \t\n\r\n x\u00a0y\u3000z caf\u00e9 e\u0301 \u1100\u1161\u11a8 \u0958",
    "\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9 \xE6\x97\xA5\xE6\x9C\xAC 123456",
    "bad \xFF\xC0\xAF utf8 \xF0\x9F\x98",
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > 64 * 1024) return -1;
  std::string_view json(reinterpret_cast<const char*>(data), size);  // NOLINT: bytes as chars
  auto loaded = gpubox::tokenizer::Tokenizer::from_json(json, "fuzz.json");
  if (!loaded) {
    check(!loaded.status().message().empty());
    return 0;
  }
  const auto& tokenizer = *loaded.value();
  for (std::string_view text : kTexts) {
    for (bool special : {true, false}) {
      auto encoding = tokenizer.encode(text, special);
      check(encoding.ids.size() == encoding.offsets.size());
      for (auto [begin, end] : encoding.offsets) check(begin <= text.size() && end <= text.size());
      for (bool skip : {false, true}) check(gpubox::tokenizer::utf8_is_valid(tokenizer.decode(encoding.ids, skip)));
    }
  }
  check(tokenizer.vocab_size() < (std::size_t{1} << 32));
  return 0;
}
