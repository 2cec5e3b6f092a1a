// host/attach/: Jupyter's wire format (delimiter, header, HMAC-SHA256) and
// connection files, as `gpubox attach` reads and writes them.
#include <sys/stat.h>

#include <gtest/gtest.h>

#include "host/attach/connection_file.h"
#include "host/attach/jupyter_wire.h"
#include "tests/unit/temp_dir.h"

namespace gpubox::host {
namespace {

std::vector<zmq::message_t> frames_of(std::initializer_list<std::string> parts) {
  std::vector<zmq::message_t> frames;
  for (const auto& part : parts) frames.emplace_back(part.data(), part.size());
  return frames;
}

TEST(JupyterWire, SignatureIsHmacSha256OverTheFourPartsInOrder) {
  // RFC 4231-style known answer: HMAC-SHA256("key", "The quick brown fox jumps over the lazy dog").
  auto parts = frames_of({"The quick ", "brown fox ", "jumps over ", "the lazy dog"});
  HmacSigner signer("key");
  std::string signature = signer.sign(parts.data());
  EXPECT_EQ(signature, "f7bc83f430538424b13298e6aa6fb143ef4d59a14946175997479dbc2d1a3cd8");
  EXPECT_TRUE(signer.verify(signature, parts.data()));
  signature[0] = signature[0] == '0' ? '1' : '0';
  EXPECT_FALSE(signer.verify(signature, parts.data()));
  EXPECT_FALSE(signer.verify("", parts.data()));
  EXPECT_FALSE(HmacSigner("other key").verify(signer.sign(parts.data()), parts.data()));
  auto swapped = frames_of({"brown fox ", "The quick ", "jumps over ", "the lazy dog"});
  EXPECT_FALSE(signer.verify(signer.sign(parts.data()), swapped.data()));
}

TEST(JupyterWire, EmptyKeyMeansUnsigned) {
  auto parts = frames_of({"{}", "{}", "{}", "{}"});
  HmacSigner signer("");
  EXPECT_FALSE(signer.enabled());
  EXPECT_EQ(signer.sign(parts.data()), "");
  EXPECT_TRUE(signer.verify("anything", parts.data()));
}

TEST(JupyterWire, DelimiterNeedsFivePartsAfterIt) {
  auto message = frames_of({"id-1", "id-2", "<IDS|MSG>", "sig", "{}", "{}", "{}", "{}", "buffer"});
  auto found = locate_delimiter(message);
  ASSERT_TRUE(found) << found.status().to_string();
  EXPECT_EQ(*found, 2u);
  auto short_message = frames_of({"id", "<IDS|MSG>", "sig", "{}", "{}", "{}"});
  auto refused = locate_delimiter(short_message);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.status().code(), ErrorCode::invalid_request);
  EXPECT_NE(refused.status().message().find("got 4 frames"), std::string::npos);
  auto none = frames_of({"id", "sig", "{}", "{}", "{}", "{}"});
  ASSERT_FALSE(locate_delimiter(none));
  EXPECT_NE(locate_delimiter(none).status().message().find("no <IDS|MSG> delimiter"), std::string::npos);
}

TEST(JupyterWire, HeaderMsgType) {
  EXPECT_EQ(header_msg_type(R"({"msg_type": "execute_request", "msg_id": "1"})"), "execute_request");
  EXPECT_EQ(header_msg_type(R"({"msg_type": 3})"), "");
  EXPECT_EQ(header_msg_type("[1, 2]"), "");
  EXPECT_EQ(header_msg_type("{not json"), "");
  EXPECT_EQ(header_msg_type(""), "");
}

constexpr char kGood[] = R"({"ip": "127.0.0.1", "transport": "tcp", "key": "abc", "signature_scheme": "hmac-sha256",
  "shell_port": 50001, "iopub_port": 50002, "stdin_port": 50003, "control_port": 50004, "hb_port": 50005,
  "kernel_name": "gpubox-box"})";

TEST(ConnectionFile, ParsesJupyterClientsFormat) {
  auto info = parse_connection_file(kGood);
  ASSERT_TRUE(info) << info.status().to_string();
  EXPECT_EQ(info->ip, "127.0.0.1");
  EXPECT_EQ(info->shell_port, 50001);
  EXPECT_EQ(info->iopub_port, 50002);
  EXPECT_EQ(info->stdin_port, 50003);
  EXPECT_EQ(info->control_port, 50004);
  EXPECT_EQ(info->hb_port, 50005);
  EXPECT_EQ(info->key, "abc");
  EXPECT_EQ(info->kernel_name, "gpubox-box");
}

TEST(ConnectionFile, RefusalsNameTheField) {
  auto refused = [](const std::string& text) {
    auto info = parse_connection_file(text);
    EXPECT_FALSE(info) << text;
    EXPECT_EQ(info.status().code(), ErrorCode::invalid_request);
    return info.status().message();
  };
  auto with = [](const std::string& from, const std::string& to) {
    std::string text = kGood;
    text.replace(text.find(from), from.size(), to);
    return text;
  };
  EXPECT_NE(refused("[]").find("expected a JSON object"), std::string::npos);
  EXPECT_NE(refused(with("127.0.0.1", "0.0.0.0")).find("ip: attach serves this machine only"), std::string::npos);
  EXPECT_NE(refused(with("127.0.0.1", "10.0.0.1")).find("ip:"), std::string::npos);
  EXPECT_NE(refused(with("\"tcp\"", "\"ipc\"")).find("transport"), std::string::npos);
  EXPECT_NE(refused(with("50002", "0")).find("iopub_port: expected a port"), std::string::npos);
  EXPECT_NE(refused(with("50005", "65536")).find("hb_port"), std::string::npos);
  EXPECT_NE(refused(with("50001", "\"50001\"")).find("shell_port"), std::string::npos);
  EXPECT_NE(refused(with("hmac-sha256", "hmac-md5")).find("signature_scheme"), std::string::npos);
  EXPECT_NE(refused(with("\"abc\"", "7")).find("key: expected a string"), std::string::npos);
}

TEST(ConnectionFile, WrittenOwnerOnlyAndReadBack) {
  test::TempDir dir;
  auto info = parse_connection_file(kGood);
  ASSERT_TRUE(info);
  std::string path = dir.file("kernel.json");
  ASSERT_TRUE(write_connection_file(path, *info));
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  auto back = read_connection_file(path);
  ASSERT_TRUE(back) << back.status().to_string();
  EXPECT_EQ(connection_json(*back), connection_json(*info));
}

TEST(ConnectionFile, UnreadableOrMissing) {
  test::TempDir dir;
  auto missing = read_connection_file(dir.file("nope.json"));
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.status().code(), ErrorCode::not_found);
  auto directory = read_connection_file(dir.path());
  ASSERT_FALSE(directory);
  EXPECT_NE(directory.status().message().find("cannot read connection file"), std::string::npos);
  auto bad = read_connection_file(dir.write("bad.json", "{"));
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.status().message().find("bad.json"), std::string::npos);
}

TEST(ConnectionFile, FreshKeysDiffer) {
  auto a = random_hex_key(), b = random_hex_key();
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->size(), 64u);
  EXPECT_NE(*a, *b);
}

}  // namespace
}  // namespace gpubox::host
