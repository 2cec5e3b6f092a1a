#include "rpc/protocol.h"

namespace gpubox::rpc {
namespace {

using nlohmann::json;

Status bad(std::string message) { return Status(ErrorCode::invalid_request, std::move(message)); }

// Builds the DOM like nlohmann's own parser, but refuses nesting deeper than
// max_depth, so a hostile body cannot exhaust the stack or memory.
class DepthLimitedSax : public nlohmann::detail::json_sax_dom_parser<json> {
 public:
  DepthLimitedSax(json& result, int max_depth)
      : nlohmann::detail::json_sax_dom_parser<json>(result, false), max_depth_(max_depth) {}
  bool start_object(std::size_t elements) {
    if (++depth_ > max_depth_) throw std::out_of_range("nested deeper than 64 levels");
    return nlohmann::detail::json_sax_dom_parser<json>::start_object(elements);
  }
  bool end_object() {
    --depth_;
    return nlohmann::detail::json_sax_dom_parser<json>::end_object();
  }
  bool start_array(std::size_t elements) {
    if (++depth_ > max_depth_) throw std::out_of_range("nested deeper than 64 levels");
    return nlohmann::detail::json_sax_dom_parser<json>::start_array(elements);
  }
  bool end_array() {
    --depth_;
    return nlohmann::detail::json_sax_dom_parser<json>::end_array();
  }

 private:
  int depth_ = 0;
  int max_depth_;
};

}  // namespace

std::string_view kind_name(Kind kind) {
  switch (kind) {
    case Kind::call: return "CALL";
    case Kind::cancel: return "CANCEL";
    case Kind::credit: return "CREDIT";
    case Kind::data: return "DATA";
    case Kind::result: return "RESULT";
    case Kind::error: return "ERROR";
  }
  return "?";
}

// The header is on every message, so it has its own small msgpack codec:
// a fixarray of 6, unsigned integers and one string.
namespace {

void put_uint(std::string& out, std::uint64_t value) {
  if (value < 0x80) {
    out.push_back(static_cast<char>(value));
    return;
  }
  int bytes;
  if (value <= 0xff) {
    out.push_back(static_cast<char>(0xcc));
    bytes = 1;
  } else if (value <= 0xffff) {
    out.push_back(static_cast<char>(0xcd));
    bytes = 2;
  } else if (value <= 0xffffffffu) {
    out.push_back(static_cast<char>(0xce));
    bytes = 4;
  } else {
    out.push_back(static_cast<char>(0xcf));
    bytes = 8;
  }
  for (int i = bytes - 1; i >= 0; --i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

void put_str(std::string& out, std::string_view text) {
  if (text.size() < 32) {
    out.push_back(static_cast<char>(0xa0 | text.size()));
  } else if (text.size() <= 0xff) {
    out.push_back(static_cast<char>(0xd9));
    out.push_back(static_cast<char>(text.size()));
  } else if (text.size() <= 0xffff) {
    out.push_back(static_cast<char>(0xda));
    out.push_back(static_cast<char>((text.size() >> 8) & 0xff));
    out.push_back(static_cast<char>(text.size() & 0xff));
  } else {
    out.push_back(static_cast<char>(0xdb));
    for (int shift : {24, 16, 8, 0}) out.push_back(static_cast<char>((text.size() >> shift) & 0xff));
  }
  out.append(text);
}

// Reads msgpack values from a byte range; every read checks the bounds.
class HeaderReader {
 public:
  explicit HeaderReader(std::string_view bytes) : bytes_(bytes) {}
  bool done() const { return pos_ == bytes_.size(); }

  std::optional<std::uint8_t> byte() {
    if (pos_ >= bytes_.size()) return std::nullopt;
    return static_cast<std::uint8_t>(bytes_[pos_++]);
  }

  std::optional<std::uint64_t> big_endian(int count) {
    if (bytes_.size() - pos_ < static_cast<std::size_t>(count)) return std::nullopt;
    std::uint64_t value = 0;
    for (int i = 0; i < count; ++i) value = (value << 8) | static_cast<std::uint8_t>(bytes_[pos_++]);
    return value;
  }

  // A non-negative integer in any msgpack integer format.
  std::optional<std::uint64_t> uint() {
    auto tag = byte();
    if (!tag) return std::nullopt;
    if (*tag < 0x80) return *tag;
    switch (*tag) {
      case 0xcc: return big_endian(1);
      case 0xcd: return big_endian(2);
      case 0xce: return big_endian(4);
      case 0xcf: return big_endian(8);
      case 0xd0: case 0xd1: case 0xd2: case 0xd3: {
        int count = 1 << (*tag - 0xd0);
        auto raw = big_endian(count);
        if (!raw) return std::nullopt;
        std::uint64_t sign_bit = std::uint64_t{1} << (8 * count - 1);
        if (*raw & sign_bit) return std::nullopt;  // negative
        return raw;
      }
      default: return std::nullopt;
    }
  }

  std::optional<std::string_view> str() {
    auto tag = byte();
    if (!tag) return std::nullopt;
    std::optional<std::uint64_t> length;
    if ((*tag & 0xe0) == 0xa0) length = *tag & 0x1f;
    else if (*tag == 0xd9) length = big_endian(1);
    else if (*tag == 0xda) length = big_endian(2);
    else if (*tag == 0xdb) length = big_endian(4);
    if (!length || bytes_.size() - pos_ < *length) return std::nullopt;
    std::string_view text = bytes_.substr(pos_, *length);
    pos_ += *length;
    return text;
  }

 private:
  std::string_view bytes_;
  std::size_t pos_ = 0;
};

}  // namespace

std::string encode_header(const Header& header) {
  std::string out;
  out.reserve(16 + header.method.size());
  out.push_back(static_cast<char>(0x96));
  put_uint(out, kProtocolVersion);
  put_uint(out, header.id);
  put_uint(out, static_cast<std::uint64_t>(header.kind));
  put_str(out, header.method);
  put_uint(out, header.timeout_ms);
  put_uint(out, header.credit);
  return out;
}

Result<Header> decode_header(std::string_view bytes) {
  if (bytes.size() > 512) return bad("header: longer than 512 bytes");
  HeaderReader reader(bytes);
  auto tag = reader.byte();
  if (!tag || *tag != 0x96) return bad("header: expected a msgpack array of 6 elements");
  auto version = reader.uint();
  if (!version || *version != kProtocolVersion) return bad("header[0] version: expected 1");
  auto id = reader.uint();
  if (!id || *id == 0) return bad("header[1] id: expected an unsigned integer from 1");
  auto kind = reader.uint();
  if (!kind || *kind > static_cast<std::uint64_t>(Kind::error)) return bad("header[2] kind: expected 0 to 5");
  auto method = reader.str();
  if (!method) return bad("header[3] method: expected a string");
  auto timeout = reader.uint();
  if (!timeout) return bad("header[4] timeout_ms: expected an unsigned integer");
  auto credit = reader.uint();
  if (!credit) return bad("header[5] credit: expected an unsigned integer");
  if (!reader.done()) return bad("header: bytes after the 6 elements");
  Header header;
  header.id = *id;
  header.kind = static_cast<Kind>(*kind);
  header.method = std::string(*method);
  header.timeout_ms = *timeout;
  header.credit = *credit;
  if (header.kind == Kind::call && header.method.empty()) return bad("header[3] method: empty on CALL");
  if (header.kind != Kind::call && !header.method.empty()) return bad("header[3] method: only CALL names a method");
  return header;
}

Result<json> decode_body(std::string_view bytes, std::size_t max_bytes) {
  if (bytes.size() > max_bytes) {
    return Status(ErrorCode::resource_exhausted,
                  "body: " + std::to_string(bytes.size()) + " bytes, more than the limit of " + std::to_string(max_bytes));
  }
  if (bytes.empty()) return bad("body: empty frame (send an empty map, 0x80)");
  if (bytes.size() == 1 && static_cast<std::uint8_t>(bytes[0]) == 0x80) return json::object();
  json body;
  try {
    DepthLimitedSax sax(body, 64);
    auto input = nlohmann::detail::input_adapter(bytes.begin(), bytes.end());
    nlohmann::detail::binary_reader<json, decltype(input), DepthLimitedSax> reader(std::move(input), nlohmann::detail::input_format_t::msgpack);
    if (!reader.sax_parse(nlohmann::detail::input_format_t::msgpack, &sax, true)) return bad("body: not valid msgpack");
  } catch (const json::exception&) {
    return bad("body: not valid msgpack");
  } catch (const std::out_of_range& e) {
    return bad(std::string("body: ") + e.what());
  }
  if (!body.is_object()) return bad("body: expected a map");
  return body;
}

std::string encode_body(const json& body) {
  if (body.is_object() && body.empty()) return std::string(1, static_cast<char>(0x80));
  std::string out;
  json::to_msgpack(body, out);
  return out;
}

json error_body(const Status& status) {
  return json{{"code", std::string(error_code_name(status.code()))}, {"message", status.message()}};
}

Status status_from_error_body(const json& body) {
  if (!body.is_object() || !body.contains("code") || !body["code"].is_string()) {
    return Status(ErrorCode::internal, "malformed ERROR body");
  }
  auto code = error_code_from_name(body["code"].get<std::string>());
  std::string message = body.contains("message") && body["message"].is_string() ? body["message"].get<std::string>() : "";
  return Status(code.value_or(ErrorCode::internal), message);
}

}  // namespace gpubox::rpc
