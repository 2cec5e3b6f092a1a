// gpubox-tokenize-tool FILE: loads a tokenizer.json and, for each line of
// stdin (a JSON string), writes one JSON line with the encodings with and
// without special tokens and both decodings of the former. The comparison
// test drives it against Hugging Face's tokenizers.
#include <iostream>
#include <string>

#include <nlohmann/json.hpp>

#include "model/tokenizer/tokenizer.h"

namespace {

nlohmann::json encoding_json(const gpubox::tokenizer::Encoding& e) {
  nlohmann::json offsets = nlohmann::json::array();
  for (auto [b, end] : e.offsets) offsets.push_back({b, end});
  return {{"ids", e.ids}, {"offsets", offsets}};
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: gpubox-tokenize-tool TOKENIZER_JSON < lines\n";
    return 2;
  }
  auto loaded = gpubox::tokenizer::Tokenizer::from_file(argv[1]);
  if (!loaded) {
    std::cerr << loaded.status().to_string() << "\n";
    return 1;
  }
  const auto& tokenizer = *loaded.value();
  std::string line;
  while (std::getline(std::cin, line)) {
    nlohmann::json in = nlohmann::json::parse(line, nullptr, false);
    if (!in.is_string()) {
      std::cerr << "each input line must be a JSON string\n";
      return 2;
    }
    std::string text = in.get<std::string>();
    auto with = tokenizer.encode(text, true);
    auto without = tokenizer.encode(text, false);
    nlohmann::json out = {{"with", encoding_json(with)},
                          {"without", encoding_json(without)},
                          {"decoded", tokenizer.decode(with.ids, false)},
                          {"decoded_skip", tokenizer.decode(with.ids, true)}};
    std::cout << out.dump(-1, ' ', true, nlohmann::json::error_handler_t::replace) << "\n";
  }
  return 0;
}
