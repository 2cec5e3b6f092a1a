#include "model/tokenizer/bpe.h"

#include <cstdio>
#include <queue>

#include "model/tokenizer/utf8.h"

namespace gpubox::tokenizer {
namespace {

// One symbol of a word being merged: a doubly linked list over a vector.
struct Symbol {
  std::int32_t id;
  std::int64_t prev, next;
  std::uint32_t len;
};

struct Candidate {
  std::int32_t rank;
  std::size_t pos;
  std::int32_t new_id;
  // The lowest rank first, then the leftmost position.
  bool operator<(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
};

std::pair<std::string, std::string> parse_merge(const JsonNode& merge) {
  if (merge.is_string()) {
    std::string s = merge.str();
    auto space = s.find(' ');
    if (space != std::string::npos) return {s.substr(0, space), s.substr(space + 1)};
  } else if (merge.is_array() && merge.raw().size() == 2 && merge.raw()[0].is_string() && merge.raw()[1].is_string()) {
    return {merge.raw()[0].get<std::string>(), merge.raw()[1].get<std::string>()};
  }
  merge.fail("expected \"a b\" or [\"a\",\"b\"]");
}

}  // namespace

Bpe::Bpe(const JsonNode& model) {
  if (auto type = model.get("type"); type && type->str() != "BPE")
    type->fail("model type \"" + type->str() + "\" is not supported (only BPE)");
  if (auto dropout = model.get("dropout"); dropout && dropout->raw().is_number() && dropout->raw().get<double>() != 0.0)
    dropout->fail("BPE dropout is random and not supported");
  for (auto& [token, id] : model.at("vocab").members()) {
    std::int32_t v = id.id();
    vocab_[token] = v;
    vocab_r_[v] = token;
  }
  if (auto p = model.get("continuing_subword_prefix")) {
    prefix_ = p->str();
    has_prefix_ = true;
  }
  if (auto s = model.get("end_of_word_suffix")) {
    suffix_ = s->str();
    has_suffix_ = true;
  }
  fuse_unk_ = model.opt_bool("fuse_unk", false);
  byte_fallback_ = model.opt_bool("byte_fallback", false);
  ignore_merges_ = model.opt_bool("ignore_merges", false);
  if (auto unk = model.get("unk_token")) {
    auto it = vocab_.find(unk->str());
    if (it == vocab_.end()) unk->fail("unk_token \"" + unk->str() + "\" is not in the vocab");
    unk_id_ = it->second;
  }
  auto merges = model.at("merges").elements();
  merges_.reserve(merges.size());
  for (std::size_t rank = 0; rank < merges.size(); ++rank) {
    auto [a, b] = parse_merge(merges[rank]);
    // Like Hugging Face, one file uses one form throughout.
    if (merges[rank].is_string() != merges[0].is_string())
      merges[rank].fail(merges[0].is_string() ? "expected \"a b\" like model.merges[0]" : "expected [\"a\",\"b\"] like model.merges[0]");
    auto ia = vocab_.find(a), ib = vocab_.find(b);
    if (ia == vocab_.end()) merges[rank].fail("token \"" + a + "\" is not in the vocab");
    if (ib == vocab_.end()) merges[rank].fail("token \"" + b + "\" is not in the vocab");
    // Hugging Face cuts the prefix's length off b whether or not b starts with it.
    if (has_prefix_ && (b.size() < prefix_.size() ||
                        (b.size() > prefix_.size() && (static_cast<unsigned char>(b[prefix_.size()]) & 0xC0) == 0x80)))
      merges[rank].fail("token \"" + b + "\" cannot lose the continuing_subword_prefix");
    std::string joined = a + (has_prefix_ ? b.substr(prefix_.size()) : b);
    auto inew = vocab_.find(joined);
    if (inew == vocab_.end()) merges[rank].fail("merged token \"" + joined + "\" is not in the vocab");
    merges_[pair_key(ia->second, ib->second)] = Merge{static_cast<std::int32_t>(rank), inew->second};
  }
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    auto it = vocab_.find(name);
    byte_ids_[static_cast<std::size_t>(b)] = it == vocab_.end() ? -1 : it->second;
  }
}

std::optional<std::int32_t> Bpe::token_to_id(std::string_view token) const {
  auto it = vocab_.find(std::string(token));
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* Bpe::id_to_token(std::int32_t id) const {
  auto it = vocab_r_.find(id);
  return it == vocab_r_.end() ? nullptr : &it->second;
}

void Bpe::tokenize(std::string_view word, std::vector<ModelToken>& out) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    if (auto it = vocab_.find(std::string(word)); it != vocab_.end()) {
      out.push_back({it->second, 0, static_cast<std::uint32_t>(word.size())});
      return;
    }
  }
  std::string key(word);
  {
    ReaderMutexLock lock(cache_mutex_);
    if (auto it = cache_.find(key); it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<ModelToken> tokens;
  merge_word(word, tokens);
  if (word.size() < kCacheWordLength) {
    WriterMutexLock lock(cache_mutex_);
    if (cache_.size() < kCacheCapacity) cache_.emplace(std::move(key), tokens);
  }
  out.insert(out.end(), tokens.begin(), tokens.end());
}

void Bpe::merge_word(std::string_view word, std::vector<ModelToken>& out) const {
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  auto add = [&](std::int32_t id, std::size_t len) {
    std::int64_t n = static_cast<std::int64_t>(symbols.size());
    symbols.push_back({id, n - 1, n + 1, static_cast<std::uint32_t>(len)});
  };
  bool has_unk = false;  // a pending unk symbol of unk_len bytes
  std::size_t unk_len = 0;
  std::string piece;
  for (std::size_t i = 0; i < word.size();) {
    std::size_t n = utf8_lead_length(static_cast<unsigned char>(word[i]));
    if (i + n > word.size()) n = word.size() - i;
    bool first = i == 0, last = i + n >= word.size();
    piece.clear();
    if (!first && has_prefix_) piece += prefix_;
    piece.append(word.substr(i, n));
    if (last && has_suffix_) piece += suffix_;
    i += n;
    if (auto it = vocab_.find(piece); it != vocab_.end()) {
      if (has_unk) {
        add(*unk_id_, unk_len);
        has_unk = false;
      }
      add(it->second, n);
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (char c : piece) all = all && byte_ids_[static_cast<unsigned char>(c)] >= 0;
      if (all) {
        for (char c : piece) add(byte_ids_[static_cast<unsigned char>(c)], 1);
        continue;
      }
    }
    if (unk_id_) {
      if (has_unk && fuse_unk_) {
        unk_len += n;
      } else {
        if (has_unk) add(*unk_id_, unk_len);
        has_unk = true;
        unk_len = n;
      }
    }
  }
  if (has_unk) add(*unk_id_, unk_len);
  if (!symbols.empty()) symbols.back().next = -1;

  std::priority_queue<Candidate> queue;
  for (std::size_t i = 0; i + 1 < symbols.size(); ++i) {
    auto it = merges_.find(pair_key(symbols[i].id, symbols[i + 1].id));
    if (it != merges_.end()) queue.push({it->second.rank, i, it->second.new_id});
  }
  while (!queue.empty()) {
    Candidate top = queue.top();
    queue.pop();
    Symbol& cur = symbols[top.pos];
    if (cur.len == 0 || cur.next == -1) continue;
    auto next_pos = static_cast<std::size_t>(cur.next);
    Symbol right = symbols[next_pos];
    auto it = merges_.find(pair_key(cur.id, right.id));
    if (it == merges_.end() || it->second.new_id != top.new_id) continue;
    cur.id = top.new_id;
    cur.len += right.len;
    cur.next = right.next;
    symbols[next_pos].len = 0;
    if (right.next > -1 && static_cast<std::size_t>(right.next) < symbols.size())
      symbols[static_cast<std::size_t>(right.next)].prev = static_cast<std::int64_t>(top.pos);
    if (cur.prev >= 0) {
      auto prev = static_cast<std::size_t>(cur.prev);
      auto m = merges_.find(pair_key(symbols[prev].id, cur.id));
      if (m != merges_.end()) queue.push({m->second.rank, prev, m->second.new_id});
    }
    if (cur.next >= 0 && static_cast<std::size_t>(cur.next) < symbols.size()) {
      auto m = merges_.find(pair_key(cur.id, symbols[static_cast<std::size_t>(cur.next)].id));
      if (m != merges_.end()) queue.push({m->second.rank, top.pos, m->second.new_id});
    }
  }
  std::uint32_t offset = 0;
  for (const Symbol& s : symbols) {
    if (s.len == 0) continue;
    out.push_back({s.id, offset, offset + s.len});
    offset += s.len;
  }
}

}  // namespace gpubox::tokenizer
