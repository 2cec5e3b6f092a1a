// The wire codec (rpc/protocol.h) and the server's message checks
// (rpc/message.h) as pure functions: round trips and every refusal.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "rpc/message.h"
#include "rpc/params.h"
#include "rpc/protocol.h"

namespace gpubox::rpc {
namespace {

using nlohmann::json;

std::string msgpack(const json& value) {
  std::string out;
  json::to_msgpack(value, out);
  return out;
}

template <typename T>
ErrorCode code_of_status(const Result<T>& result) {
  return result.status().code();
}

std::string nested_maps(int depth) {
  json value = json::object();
  for (int i = 0; i < depth - 1; ++i) value = json{{"k", value}};
  return msgpack(value);
}

TEST(CodecTest, HeaderRoundTripsEveryKindAndExtremeValues) {
  for (int kind = 0; kind <= 5; ++kind) {
    Header header;
    header.id = kind == 3 ? std::numeric_limits<std::uint64_t>::max() : 1000u + static_cast<unsigned>(kind);
    header.kind = static_cast<Kind>(kind);
    header.method = kind == 0 ? std::string(120, 'm') : "";
    header.timeout_ms = kind == 0 ? std::numeric_limits<std::uint64_t>::max() : 0;
    header.credit = static_cast<std::uint64_t>(kind) << 40;
    auto decoded = decode_header(encode_header(header));
    ASSERT_TRUE(decoded) << decoded.status().to_string();
    EXPECT_EQ(decoded->id, header.id);
    EXPECT_EQ(decoded->kind, header.kind);
    EXPECT_EQ(decoded->method, header.method);
    EXPECT_EQ(decoded->timeout_ms, header.timeout_ms);
    EXPECT_EQ(decoded->credit, header.credit);
    EXPECT_NE(kind_name(header.kind), "?");
  }
}

TEST(CodecTest, HeaderIsTheDocumentedSixElementArray) {
  Header header;
  header.id = 7;
  header.kind = Kind::call;
  header.method = "sys.ping";
  header.timeout_ms = 1500;
  header.credit = 4;
  EXPECT_EQ(json::from_msgpack(encode_header(header)), json::parse(R"([1, 7, 0, "sys.ping", 1500, 4])"));
  // Any client's msgpack encoder must do, not just ours.
  auto decoded = decode_header(msgpack(json::parse(R"([1, 7, 0, "sys.ping", 1500, 4])")));
  ASSERT_TRUE(decoded) << decoded.status().to_string();
  EXPECT_EQ(decoded->timeout_ms, 1500u);
}

TEST(CodecTest, HeaderRefusalsNameTheElement) {
  struct Case {
    std::string bytes;
    std::string mentions;
  };
  std::vector<Case> cases = {
      {msgpack(json::parse(R"([2, 7, 0, "sys.ping", 0, 0])")), "version"},
      {msgpack(json::parse(R"([1, 0, 0, "sys.ping", 0, 0])")), "id"},
      {msgpack(json::parse(R"([1, -3, 0, "sys.ping", 0, 0])")), "id"},
      {msgpack(json::parse(R"([1, 7, 6, "", 0, 0])")), "kind"},
      {msgpack(json::parse(R"([1, 7, 0, 5, 0, 0])")), "method"},
      {msgpack(json::parse(R"([1, 7, 0, "", 0, 0])")), "method"},
      {msgpack(json::parse(R"([1, 7, 1, "sys.ping", 0, 0])")), "method"},
      {msgpack(json::parse(R"([1, 7, 0, "sys.ping", -1, 0])")), "timeout_ms"},
      {msgpack(json::parse(R"([1, 7, 0, "sys.ping", 0, 1.5])")), "credit"},
      {msgpack(json::parse(R"([1, 7, 0, "sys.ping", 0])")), "6"},
      {msgpack(json::parse(R"({"id": 7})")), "6"},
      {"\xff\x00\x01", ""},
      {"", ""},
      {msgpack(json::parse(R"([1, 7, 0, "sys.ping", 0, 0])")) + "x", ""},
      {msgpack(json::array({1, 7, 0, std::string(600, 'm'), 0, 0})), "512"},
  };
  for (const auto& c : cases) {
    auto decoded = decode_header(c.bytes);
    ASSERT_FALSE(decoded) << json::from_msgpack(c.bytes, true, false).dump();
    EXPECT_EQ(decoded.status().code(), ErrorCode::invalid_request);
    EXPECT_NE(decoded.status().message().find(c.mentions), std::string::npos) << decoded.status().message();
  }
}

TEST(CodecTest, PeekRequestIdReadsTheIdOfARefusedHeader) {
  EXPECT_EQ(peek_request_id(msgpack(json::parse(R"([2, 7, 0, "sys.ping", 0, 0])"))), 7u);
  EXPECT_EQ(peek_request_id(msgpack(json::parse(R"([1, 9, 6, "", 0, 0])"))), 9u);
  EXPECT_EQ(peek_request_id(msgpack(json::parse(R"([1, 0, 0, "x", 0, 0])"))), 0u);
  EXPECT_EQ(peek_request_id(msgpack(json::parse(R"([1, -4, 0, "x", 0, 0])"))), 0u);
  EXPECT_EQ(peek_request_id(msgpack(json::parse(R"([1])"))), 0u);
  EXPECT_EQ(peek_request_id("\xff\xff"), 0u);
  EXPECT_EQ(peek_request_id(""), 0u);
}

TEST(CodecTest, BodyRoundTripsEveryType) {
  json body = {
      {"nil", nullptr},
      {"t", true},
      {"f", false},
      {"small", 5},
      {"negative", -123456789},
      {"min", std::numeric_limits<std::int64_t>::min()},
      {"max", std::numeric_limits<std::uint64_t>::max()},
      {"float", 0.25},
      {"text", "héllo"},
      {"bytes", binary(std::string("\x00\x01\xff", 3))},
      {"list", {1, "two", json::array(), json::object()}},
      {"map", {{"inner", {{"deeper", {1, 2, 3}}}}}},
  };
  auto decoded = decode_body(encode_body(body), 1 << 20);
  ASSERT_TRUE(decoded) << decoded.status().to_string();
  EXPECT_EQ(*decoded, body);
  EXPECT_EQ(encode_body(json::object()), std::string("\x80"));
  auto empty = decode_body("\x80", 16);
  ASSERT_TRUE(empty);
  EXPECT_EQ(*empty, json::object());
}

TEST(CodecTest, BodyRefusals) {
  EXPECT_EQ(decode_body(std::string(1025, 'x'), 1024).status().code(), ErrorCode::resource_exhausted);
  EXPECT_EQ(decode_body("", 1024).status().code(), ErrorCode::invalid_request);
  EXPECT_EQ(decode_body(msgpack(json::array({1, 2})), 1024).status().code(), ErrorCode::invalid_request);
  EXPECT_EQ(decode_body(msgpack(5), 1024).status().code(), ErrorCode::invalid_request);
  EXPECT_EQ(decode_body("\x81\xa1", 1024).status().code(), ErrorCode::invalid_request);       // truncated
  EXPECT_EQ(decode_body("\x80\x80", 1024).status().code(), ErrorCode::invalid_request);       // trailing bytes
  EXPECT_EQ(decode_body("\x81\xa1""a\xdd\xff\xff\xff\xff", 1024).status().code(), ErrorCode::invalid_request);
  // 64 levels of nesting are fine, 65 are not.
  EXPECT_TRUE(decode_body(nested_maps(64), 1 << 20));
  auto deep = decode_body(nested_maps(65), 1 << 20);
  EXPECT_EQ(deep.status().code(), ErrorCode::invalid_request);
  EXPECT_NE(deep.status().message().find("64"), std::string::npos) << deep.status().message();
}

TEST(CodecTest, ErrorBodyRoundTripsEveryCode) {
  for (int code = static_cast<int>(ErrorCode::invalid_request); code <= static_cast<int>(ErrorCode::internal); ++code) {
    Status status(static_cast<ErrorCode>(code), "what went wrong");
    auto decoded = decode_body(encode_body(error_body(status)), 1 << 20);
    ASSERT_TRUE(decoded);
    Status back = status_from_error_body(*decoded);
    EXPECT_EQ(back.code(), status.code());
    EXPECT_EQ(back.message(), "what went wrong");
  }
  EXPECT_EQ(status_from_error_body(json{{"code", 5}}).code(), ErrorCode::internal);
  EXPECT_EQ(status_from_error_body(json{{"code", "no_such_code"}}).code(), ErrorCode::internal);
  EXPECT_EQ(status_from_error_body(json::array()).code(), ErrorCode::internal);
}

TEST(CodecTest, ParseRequestAppliesEveryStatelessCheck) {
  Limits limits;
  limits.max_attachments = 2;
  limits.max_body_bytes = 64;
  Header call;
  call.id = 3;
  call.method = "sys.ping";
  std::string header = encode_header(call);
  std::string body = encode_body(json{{"a", 1}});
  auto parse = [&](std::vector<std::string_view> frames) { return parse_request(frames, limits); };

  auto ok = parse({header, body, "x", "y"});
  ASSERT_TRUE(ok) << ok.status().to_string();
  EXPECT_EQ(ok->header.method, "sys.ping");
  EXPECT_EQ(ok->body, json({{"a", 1}}));

  EXPECT_EQ(code_of_status(parse({header, body, "x", "y", "z"})), ErrorCode::invalid_request);
  EXPECT_EQ(code_of_status(parse({header})), ErrorCode::invalid_request);
  EXPECT_EQ(code_of_status(parse({})), ErrorCode::invalid_request);
  EXPECT_EQ(code_of_status(parse({header, std::string(65, 'x')})), ErrorCode::resource_exhausted);
  EXPECT_EQ(code_of_status(parse({header, msgpack(json::array())})), ErrorCode::invalid_request);
  Header result;
  result.id = 3;
  result.kind = Kind::result;
  EXPECT_EQ(code_of_status(parse({encode_header(result), body})), ErrorCode::invalid_request);
  Header long_method = call;
  long_method.method = std::string(limits.max_method_bytes + 1, 'm');
  EXPECT_EQ(code_of_status(parse({encode_header(long_method), body})), ErrorCode::invalid_request);
  // CANCEL, CREDIT and DATA are checked the same way.
  Header data;
  data.id = 3;
  data.kind = Kind::data;
  EXPECT_TRUE(parse({encode_header(data), body, "chunk"}));
  EXPECT_EQ(code_of_status(parse({encode_header(data), "\xc1"})), ErrorCode::invalid_request);
}

TEST(CodecTest, ParamReaderRefusesNaNAndInfinity) {
  // Regression: NaN compared false with both bounds and was accepted as a timeout.
  for (double value : {std::nan(""), std::numeric_limits<double>::infinity(), -1.0}) {
    json params = json::from_msgpack(msgpack(json{{"timeout_s", value}}));
    ParamReader reader(params);
    EXPECT_FALSE(reader.number("timeout_s", 0, 3600)) << value;
    EXPECT_EQ(reader.finish().code(), ErrorCode::invalid_request);
  }
  // Named as the caller wrote them, not as JSON's null.
  const std::pair<double, const char*> shown[] = {
      {std::nan(""), "nan"}, {std::numeric_limits<double>::infinity(), "inf"}, {-std::numeric_limits<double>::infinity(), "-inf"}};
  for (const auto& [value, text] : shown) {
    json nonfinite = json::from_msgpack(msgpack(json{{"top_p", value}}));
    ParamReader reader(nonfinite);
    EXPECT_FALSE(reader.number("top_p", 0, 1));
    EXPECT_EQ(reader.finish().message(), std::string("params.top_p: expected a number from 0 to 1, got ") + text);
  }
  json params = {{"timeout_s", 2.5}};
  ParamReader reader(params);
  EXPECT_EQ(reader.number("timeout_s", 0, 3600), 2.5);
  EXPECT_TRUE(reader.finish());
}

TEST(CodecTest, ANumberOutOfRangeNamesItsBoundsAsPeopleWriteThem) {
  json params = {{"size", -1}, {"scale", 9.0}};
  ParamReader reader(params);
  EXPECT_FALSE(reader.number("size", 0, 1073741824));
  EXPECT_EQ(reader.finish().message(), "params.size: expected a number from 0 to 1073741824, got -1");
  ParamReader fractional(params);
  EXPECT_FALSE(fractional.number("scale", 0.5, 2.25));
  EXPECT_EQ(fractional.finish().message(), "params.scale: expected a number from 0.5 to 2.25, got 9.0");
}

}  // namespace
}  // namespace gpubox::rpc
