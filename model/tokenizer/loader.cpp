#include "model/tokenizer/loader.h"

#include <unordered_map>
#include <unordered_set>

#include "model/tokenizer/utf8.h"

namespace gpubox::tokenizer {
namespace {

// Hugging Face's add_tokens: an added token keeps the id its content has in
// the vocab; a new content gets the next id after the vocab and earlier additions.
std::vector<AddedToken> load_added_tokens(const JsonNode& list, const Bpe& model) {
  std::vector<AddedToken> tokens;
  std::unordered_map<std::string, std::size_t> index;
  std::unordered_set<std::string> special;
  std::int64_t max_added = -1;
  auto vocab_size = static_cast<std::int64_t>(model.vocab_size());
  for (const JsonNode& node : list.elements()) {
    AddedToken t;
    t.content = node.at("content").str();
    node.at("id").id();
    t.special = node.opt_bool("special", false);
    t.single_word = node.opt_bool("single_word", false);
    t.lstrip = node.opt_bool("lstrip", false);
    t.rstrip = node.opt_bool("rstrip", false);
    t.normalized = node.opt_bool("normalized", !t.special);
    if (t.content.empty()) continue;
    if (t.special) special.insert(t.content);
    if (auto it = index.find(t.content); it != index.end()) {
      t.id = tokens[it->second].id;
      tokens[it->second] = t;
      continue;
    }
    if (auto id = model.token_to_id(t.content)) {
      t.id = *id;
    } else if (max_added < 0) {
      t.id = static_cast<std::int32_t>(vocab_size);
    } else {
      std::int64_t next = (max_added >= vocab_size || vocab_size == 0) ? max_added + 1 : vocab_size;
      if (next > INT32_MAX) node.fail("too many added tokens");
      t.id = static_cast<std::int32_t>(next);
    }
    max_added = std::max<std::int64_t>(max_added, t.id);
    index.emplace(t.content, tokens.size());
    tokens.push_back(std::move(t));
  }
  for (AddedToken& t : tokens) t.special = t.special || special.count(t.content) > 0;
  return tokens;
}

void refuse_if_set(const JsonNode& root, const char* key, const char* why) {
  if (auto v = root.get(key)) v->fail(std::string(key) + " is not supported: " + why);
}

}  // namespace

std::unique_ptr<TokenizerParts> load_parts(std::string_view json_text) {
  nlohmann::json doc = nlohmann::json::parse(json_text.begin(), json_text.end());
  JsonNode root(doc, "");
  if (!root.is_object()) root.fail("expected an object");
  refuse_if_set(root, "truncation", "encode() never truncates");
  refuse_if_set(root, "padding", "encode() never pads");
  auto parts = std::make_unique<TokenizerParts>();
  if (auto n = root.get("normalizer")) parts->normalizer = load_normalizer(*n);
  if (auto p = root.get("pre_tokenizer")) parts->pre_tokenizer = load_pre_tokenizer(*p);
  parts->model = std::make_unique<Bpe>(root.at("model"));
  if (auto p = root.get("post_processor")) parts->post_processor = load_post_processor(*p);
  if (auto d = root.get("decoder")) parts->decoder = load_decoder(*d);

  std::vector<AddedToken> added;
  if (auto list = root.get("added_tokens")) added = load_added_tokens(*list, *parts->model);
  std::vector<std::string> normalized_contents;
  for (const AddedToken& t : added) {
    NormalizedText n = NormalizedText::from_original(t.content, 0, t.content.size(), nullptr);
    if (t.normalized && parts->normalizer) parts->normalizer->normalize(n);
    normalized_contents.push_back(std::move(n.text));
  }
  std::unordered_set<std::string> all;
  for (const auto& [token, id] : parts->model->vocab()) all.insert(token);
  for (const AddedToken& t : added) all.insert(t.content);
  parts->vocab_size = all.size();
  parts->added = std::make_unique<AddedVocabulary>(std::move(added), normalized_contents);
  return parts;
}

std::vector<TokenRecord> encode_records(const TokenizerParts& parts, std::string_view input) {
  std::vector<TokenRecord> records;
  std::vector<Span> origin;
  std::string text;
  const std::vector<Span>* origin_ptr = nullptr;
  if (utf8_is_valid(input)) {
    text.assign(input);
  } else {
    text = utf8_lossy(input, &origin);
    origin_ptr = &origin;
  }
  // An added token's record carries the text it matched (with what lstrip and rstrip took).
  auto added_record = [&](std::int32_t id, Span offsets, std::string_view matched) {
    TokenRecord r{id, offsets, parts.added->id_to_token(id), {}};
    if (!r.token || *r.token != matched) {
      r.token = nullptr;
      r.own.assign(matched);
    }
    records.push_back(std::move(r));
  };
  auto original = [&](std::size_t b, std::size_t e) -> Span {
    if (!origin_ptr) return {static_cast<std::uint32_t>(b), static_cast<std::uint32_t>(e)};
    return {origin[b].first, origin[e - 1].second};
  };
  std::vector<ModelToken> model_tokens;
  for (const AddedSplit& raw : parts.added->split(text, false)) {
    if (raw.id) {
      added_record(*raw.id, original(raw.begin, raw.end), std::string_view(text).substr(raw.begin, raw.end - raw.begin));
      continue;
    }
    NormalizedText normalized = NormalizedText::from_original(text, raw.begin, raw.end, origin_ptr);
    if (parts.normalizer) parts.normalizer->normalize(normalized);
    for (const AddedSplit& split : parts.added->split(normalized.text, true)) {
      if (split.id) {
        added_record(*split.id, normalized.original_span(split.begin, split.end),
                     std::string_view(normalized.text).substr(split.begin, split.end - split.begin));
        continue;
      }
      std::vector<NormalizedText> pieces;
      pieces.push_back(normalized.slice(split.begin, split.end));
      if (parts.pre_tokenizer) parts.pre_tokenizer->pre_tokenize(pieces);
      for (const NormalizedText& piece : pieces) {
        model_tokens.clear();
        parts.model->tokenize(piece.text, model_tokens);
        for (const ModelToken& m : model_tokens)
          records.push_back({m.id, piece.original_span(m.begin, m.end), parts.model->id_to_token(m.id), {}});
      }
    }
  }
  return records;
}

}  // namespace gpubox::tokenizer
