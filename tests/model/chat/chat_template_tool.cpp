// gpubox-chat-template-tool: renders the conversations of a cases file (JSON
// lines: {"dir": MODEL_DIR, "messages": [...], "tools"?, "add_generation_prompt"?,
// "kwargs"?}) with model/chat and prints one JSON line per case:
// {"text": ..., "ids": [...]} or {"error": ...}. compare_hf.py checks it
// against transformers' apply_chat_template.
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "model/chat/chat_template.h"
#include "model/tokenizer/tokenizer.h"

using nlohmann::ordered_json;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: gpubox-chat-template-tool CASES.jsonl\n";
    return 2;
  }
  std::ifstream in(argv[1]);
  std::map<std::string, std::shared_ptr<const gpubox::chat::ChatTemplates>> templates;
  std::map<std::string, std::unique_ptr<gpubox::tokenizer::Tokenizer>> tokenizers;
  std::string line;
  while (std::getline(in, line)) {
    ordered_json c = ordered_json::parse(line);
    std::string dir = c["dir"];
    if (!templates.count(dir)) {
      auto t = gpubox::chat::ChatTemplates::from_directory(dir);
      if (!t) {
        std::cout << ordered_json{{"error", t.status().message()}}.dump() << "\n";
        continue;
      }
      templates[dir] = *t;
      auto tok = gpubox::tokenizer::Tokenizer::from_file(dir + "/tokenizer.json");
      if (tok) tokenizers[dir] = std::move(*tok);
    }
    const auto& t = templates[dir];
    auto text = t->apply(c["messages"], c.value("tools", ordered_json()), c.value("add_generation_prompt", false),
                         c.value("kwargs", ordered_json::object()));
    ordered_json out;
    if (!text) {
      out["error"] = text.status().message();
    } else {
      out["text"] = *text;
      if (tokenizers.count(dir)) out["ids"] = tokenizers[dir]->encode(*text, false).ids;
    }
    std::cout << out.dump(-1, ' ', false, ordered_json::error_handler_t::replace) << "\n";
  }
  return 0;
}
