#include "model/tokenizer/tokenizer.h"

#include <fstream>
#include <sstream>

#include "model/tokenizer/loader.h"
#include "model/tokenizer/utf8.h"

namespace gpubox::tokenizer {

Tokenizer::Tokenizer() = default;
Tokenizer::~Tokenizer() = default;

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_json(std::string_view json_text, std::string_view source_name) {
  std::string name(source_name);
  try {
    std::unique_ptr<Tokenizer> t(new Tokenizer());
    t->parts_ = load_parts(json_text);
    return t;
  } catch (const LoadError& e) {
    return Status(ErrorCode::invalid_request, name + ": " + e.what());
  } catch (const nlohmann::json::exception& e) {
    return Status(ErrorCode::invalid_request, name + ": not valid JSON: " + e.what());
  } catch (const std::bad_alloc&) {
    return Status(ErrorCode::resource_exhausted, name + ": out of memory while loading");
  } catch (const std::exception& e) {
    return Status(ErrorCode::internal, name + ": " + e.what());
  }
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::from_errno(errno, path);
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) return Status::from_errno(errno, path);
  return from_json(buffer.str(), path);
}

Encoding Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  std::vector<TokenRecord> records = encode_records(*parts_, text);
  if (parts_->post_processor) parts_->post_processor->process(records, add_special_tokens, text);
  Encoding out;
  out.ids.reserve(records.size());
  out.offsets.reserve(records.size());
  for (const TokenRecord& r : records) {
    out.ids.push_back(r.id);
    out.offsets.emplace_back(r.offsets.first, r.offsets.second);
  }
  return out;
}

std::string Tokenizer::decode(std::span<const std::int32_t> ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (std::int32_t id : ids) {
    const std::string* token = parts_->added->id_to_token(id);
    if (!token) token = parts_->model->id_to_token(id);
    if (!token) continue;
    if (skip_special_tokens && parts_->added->is_special(*token)) continue;
    tokens.push_back(*token);
  }
  std::string out;
  if (parts_->decoder) {
    parts_->decoder->decode_chain(tokens);
    for (const std::string& t : tokens) out += t;
  } else {
    for (std::size_t i = 0; i < tokens.size(); ++i) out += (i ? " " : "") + tokens[i];
  }
  return out;
}

std::size_t Tokenizer::vocab_size() const { return parts_->vocab_size; }

std::optional<std::int32_t> Tokenizer::token_to_id(std::string_view token) const {
  if (auto id = parts_->added->token_to_id(std::string(token))) return id;
  return parts_->model->token_to_id(token);
}

std::optional<std::string> Tokenizer::id_to_token(std::int32_t id) const {
  if (const std::string* t = parts_->added->id_to_token(id)) return *t;
  if (const std::string* t = parts_->model->id_to_token(id)) return *t;
  return std::nullopt;
}

}  // namespace gpubox::tokenizer
