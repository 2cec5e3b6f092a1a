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

std::string encode_header(const Header& header) {
  json array = json::array({kProtocolVersion, header.id, static_cast<int>(header.kind), header.method,
                            header.timeout_ms, header.credit});
  std::string out;
  json::to_msgpack(array, out);
  return out;
}

Result<Header> decode_header(std::string_view bytes) {
  if (bytes.size() > 512) return bad("header: longer than 512 bytes");
  json array;
  try {
    array = json::from_msgpack(bytes.begin(), bytes.end());
  } catch (const json::exception&) {
    return bad("header: not valid msgpack");
  }
  if (!array.is_array() || array.size() != 6) return bad("header: expected an array of 6 elements");
  if (!array[0].is_number_unsigned() || array[0].get<std::uint64_t>() != kProtocolVersion) {
    return bad("header[0] version: expected 1");
  }
  if (!array[1].is_number_unsigned() || array[1].get<std::uint64_t>() == 0) {
    return bad("header[1] id: expected an unsigned integer from 1");
  }
  if (!array[2].is_number_unsigned() || array[2].get<std::uint64_t>() > static_cast<int>(Kind::error)) {
    return bad("header[2] kind: expected 0 to 5");
  }
  if (!array[3].is_string()) return bad("header[3] method: expected a string");
  if (!array[4].is_number_unsigned()) return bad("header[4] timeout_ms: expected an unsigned integer");
  if (!array[5].is_number_unsigned()) return bad("header[5] credit: expected an unsigned integer");
  Header header;
  header.id = array[1].get<std::uint64_t>();
  header.kind = static_cast<Kind>(array[2].get<std::uint64_t>());
  header.method = array[3].get<std::string>();
  header.timeout_ms = array[4].get<std::uint64_t>();
  header.credit = array[5].get<std::uint64_t>();
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
  json body;
  try {
    DepthLimitedSax sax(body, 64);
    auto input = nlohmann::detail::input_adapter(bytes.begin(), bytes.end());
    nlohmann::detail::binary_reader<json, decltype(input), DepthLimitedSax> reader(std::move(input));
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
