// Over 600 lines: the 34 cases of the seven fs.* methods share one real-agent fixture; split, each file would repeat it.
// fs.* methods end to end: the real gpubox-agent binary, a real rpc::Client
// over its ipc:// endpoint, and real files in a per-test folder.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sodium.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <thread>

#include "rpc/client.h"
#include "rpc/params.h"
#include "tests/support/agent_rpc.h"

namespace gpubox {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;
namespace stdfs = std::filesystem;

constexpr std::size_t kMiB = 1 << 20;

// The agent as a plain child of the test, its state in state_dir, logging warnings.
testing::AgentOptions agent_options(const std::string& state_dir) {
  testing::AgentOptions options;
  options.new_pid_namespace = false;
  options.state_dir = state_dir;
  options.flags = {"--log-level", "warn"};
  return options;
}

std::string sha256_hex(std::string_view bytes) {
  unsigned char digest[crypto_hash_sha256_BYTES];
  crypto_hash_sha256(digest, reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size());
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  for (unsigned char byte : digest) {
    hex.push_back(kHex[byte >> 4]);
    hex.push_back(kHex[byte & 15]);
  }
  return hex;
}

// Deterministic, incompressible-looking bytes (xorshift64*).
std::string pattern(std::size_t size, std::uint64_t seed) {
  std::string bytes(size, '\0');
  std::uint64_t x = seed * 2654435761u + 1;
  std::size_t i = 0;
  for (; i + 8 <= size; i += 8) {
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    std::uint64_t word = x * 2685821657736338717ull;
    std::memcpy(&bytes[i], &word, 8);
  }
  for (; i < size; ++i) bytes[i] = static_cast<char>(i * 31 + seed);
  return bytes;
}

std::string bytes_of(const json& value) {
  if (value.is_string()) return value.get<std::string>();
  const auto& binary = value.get_binary();
  return std::string(binary.begin(), binary.end());
}

void write_local(const std::string& path, std::string_view content) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(content.data(), static_cast<std::streamsize>(content.size()));
  ASSERT_TRUE(out.good()) << path;
}

std::string read_local(const std::string& path) {
  std::string content;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "<missing>";
  char buffer[1 << 16];
  ssize_t n;
  while ((n = ::read(fd, buffer, sizeof buffer)) > 0) content.append(buffer, static_cast<std::size_t>(n));
  ::close(fd);
  return content;
}

// The names in a directory, sorted (to spot leftover temp files).
std::vector<std::string> names_in(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& entry : stdfs::directory_iterator(dir)) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

mode_t mode_of(const std::string& path) {
  struct stat st{};
  ::lstat(path.c_str(), &st);
  return st.st_mode & 07777;
}

#define EXPECT_ERROR(result, expected_code, fragment)                                              \
  do {                                                                                              \
    const auto& outcome_ = (result);                                                                \
    ASSERT_FALSE(outcome_.is_ok()) << "expected " #expected_code ", got " << outcome_.value().dump(); \
    EXPECT_EQ(outcome_.status().code(), ErrorCode::expected_code) << outcome_.status().to_string();  \
    EXPECT_NE(outcome_.status().message().find(fragment), std::string::npos)                        \
        << "message lacks \"" << (fragment) << "\": " << outcome_.status().message();               \
  } while (0)

// What fs.read gave back, inline or streamed.
struct Download {
  Result<json> result = json::object();
  std::string content;
  std::vector<std::uint64_t> offsets;  // of each DATA chunk
  std::vector<std::size_t> sizes;
  bool streamed = false;
};

class FsMethodsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { ASSERT_GE(sodium_init(), 0); }

  void SetUp() override {
    std::string tmpl = (stdfs::temp_directory_path() / "gpubox-fs-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    root_ = dir_ + "/files";
    ASSERT_EQ(::mkdir(root_.c_str(), 0755), 0);
    std::string error;
    agent_ = testing::AgentProcess::start_ready(agent_options(dir_ + "/state"), &error);
    ASSERT_NE(agent_, nullptr) << error;
    auto client = testing::connect_ipc(*agent_);
    ASSERT_TRUE(client.is_ok()) << client.status().to_string();
    client_ = std::move(client.value());
  }

  void TearDown() override {
    client_.reset();
    if (agent_) {
      auto status = agent_->stop();
      EXPECT_TRUE(status.has_value()) << "the agent ignored SIGTERM and was killed";
      std::string log = agent_->stdout_text() + agent_->stderr_text();
      EXPECT_EQ(log.find("Sanitizer"), std::string::npos) << "the agent reported a sanitizer error";
      EXPECT_EQ(log.find("runtime error:"), std::string::npos) << "the agent reported undefined behaviour";
      if (HasFailure()) std::cerr << "agent log:\n" << log;
      agent_.reset();
    }
    std::error_code ignored;
    if (!dir_.empty()) stdfs::remove_all(dir_, ignored);
  }

  std::string path(const std::string& name) const { return root_ + "/" + name; }
  // The agent's VmRSS in KiB (0 when unreadable).
  long rss_kib() const { return static_cast<long>(agent_->rss_bytes().value_or(0) / 1024); }

  Result<json> call(const std::string& method, const json& params, std::vector<zmq::message_t>* attachments = nullptr) {
    rpc::CallOptions options;
    options.wait = std::chrono::seconds(60);
    options.attachments = attachments;
    return client_->call(method, params, std::move(options));
  }

  // fs.write streamed in chunks of chunk_bytes, then {"eof": true}.
  Result<json> upload(json params, std::string_view content, std::size_t chunk_bytes = kMiB) {
    rpc::CallOptions options;
    options.wait = std::chrono::seconds(60);
    auto opened = client_->stream("fs.write", params, std::move(options));
    if (!opened) return opened.status();
    rpc::Stream& stream = **opened;
    for (std::size_t at = 0; at < content.size(); at += chunk_bytes) {
      std::vector<zmq::message_t> chunk;
      chunk.emplace_back(content.data() + at, std::min(chunk_bytes, content.size() - at));
      if (Status sent = stream.send(json::object(), std::move(chunk)); !sent) return sent;
    }
    if (Status sent = stream.send(json{{"eof", true}}); !sent) return sent;
    while (!stream.ended()) {
      auto next = stream.next();
      if (!next) return next.status();
    }
    return stream.result();
  }

  // fs.read, collecting DATA chunks; between chunks calls on_chunk (if any).
  Download download(const json& params, std::uint64_t window = 16, const std::function<void()>& on_chunk = nullptr) {
    Download out;
    rpc::CallOptions options;
    options.wait = std::chrono::seconds(60);
    options.window = window;
    auto opened = client_->stream("fs.read", params, std::move(options));
    if (!opened) {
      out.result = opened.status();
      return out;
    }
    rpc::Stream& stream = **opened;
    while (true) {
      auto next = stream.next();
      if (!next) {
        out.result = next.status();
        return out;
      }
      if (!next->has_value()) break;
      out.streamed = true;
      rpc::Incoming& chunk = **next;
      out.offsets.push_back(chunk.body.at("offset").get<std::uint64_t>());
      EXPECT_EQ(chunk.attachments.size(), 1u);
      for (auto& attachment : chunk.attachments) {
        out.sizes.push_back(attachment.size());
        out.content.append(attachment.data<char>(), attachment.size());
      }
      if (on_chunk) on_chunk();
    }
    out.result = stream.result();
    if (out.result.is_ok() && out.result.value().contains("data")) out.content = bytes_of(out.result.value()["data"]);
    return out;
  }

  // A directory the agent may not create entries in: a 0555 directory for
  // an unprivileged agent; for root, sysfs (root bypasses mode bits).
  std::string unwritable_dir() {
    if (::geteuid() != 0) {
      std::string locked = dir_ + "/locked";
      ::mkdir(locked.c_str(), 0555);
      return locked;
    }
    struct stat st{};
    if (::stat("/sys/kernel", &st) == 0) return "/sys";
    return "";
  }

  std::string dir_;
  std::string root_;
  std::unique_ptr<testing::AgentProcess> agent_;
  std::unique_ptr<rpc::Client> client_;
};

// ---- fs.read -------------------------------------------------------------

TEST_F(FsMethodsTest, ReadSmallFileAnswersInline) {
  write_local(path("a.txt"), "hello, gpubox\n");
  auto result = call("fs.read", {{"path", path("a.txt")}});
  ASSERT_TRUE(result.is_ok()) << result.status().to_string();
  EXPECT_EQ(result.value()["size"], 14);
  EXPECT_TRUE(result.value()["data"].is_binary());
  EXPECT_EQ(bytes_of(result.value()["data"]), "hello, gpubox\n");
  EXPECT_EQ(result.value()["sha256"], sha256_hex("hello, gpubox\n"));
}

TEST_F(FsMethodsTest, ReadEmptyFile) {
  write_local(path("empty"), "");
  auto result = call("fs.read", {{"path", path("empty")}});
  ASSERT_TRUE(result.is_ok()) << result.status().to_string();
  EXPECT_EQ(result.value()["size"], 0);
  EXPECT_EQ(bytes_of(result.value()["data"]), "");
  EXPECT_EQ(result.value()["sha256"], sha256_hex(""));
}

TEST_F(FsMethodsTest, ReadRanges) {
  std::string content = pattern(10'000, 1);
  write_local(path("r"), content);
  struct Case {
    json params;
    std::string expected;
  };
  std::vector<Case> cases = {
      {{{"offset", 100}, {"length", 50}}, content.substr(100, 50)},
      {{{"offset", 9'990}}, content.substr(9'990)},
      {{{"offset", 9'990}, {"length", 1'000}}, content.substr(9'990)},  // past the end: what there is
      {{{"length", 0}}, ""},
      {{{"offset", 20'000}}, ""},  // beyond EOF: empty
      {{{"offset", 0}, {"length", 10'000}}, content},
  };
  for (auto& c : cases) {
    json params = c.params;
    params["path"] = path("r");
    auto result = call("fs.read", params);
    ASSERT_TRUE(result.is_ok()) << params.dump() << ": " << result.status().to_string();
    EXPECT_EQ(bytes_of(result.value()["data"]), c.expected) << params.dump();
    EXPECT_EQ(result.value()["size"], c.expected.size()) << params.dump();
    EXPECT_EQ(result.value()["sha256"], sha256_hex(c.expected)) << params.dump();
  }
}

TEST_F(FsMethodsTest, ReadExactlyOneMiBIsInlineOneByteMoreStreams) {
  std::string content = pattern(kMiB + 1, 2);
  write_local(path("m"), content);
  auto inline_read = download({{"path", path("m")}, {"length", kMiB}});
  ASSERT_TRUE(inline_read.result.is_ok()) << inline_read.result.status().to_string();
  EXPECT_FALSE(inline_read.streamed);
  EXPECT_EQ(inline_read.content, content.substr(0, kMiB));

  write_local(path("exact"), content.substr(0, kMiB));
  auto exact = download({{"path", path("exact")}});
  ASSERT_TRUE(exact.result.is_ok());
  EXPECT_FALSE(exact.streamed);
  EXPECT_EQ(exact.result.value()["size"], kMiB);

  auto streamed = download({{"path", path("m")}});
  ASSERT_TRUE(streamed.result.is_ok()) << streamed.result.status().to_string();
  EXPECT_TRUE(streamed.streamed);
  EXPECT_EQ(streamed.offsets, (std::vector<std::uint64_t>{0, kMiB}));
  EXPECT_EQ(streamed.sizes, (std::vector<std::size_t>{kMiB, 1}));
  EXPECT_EQ(streamed.content, content);
  EXPECT_FALSE(streamed.result.value().contains("data"));
  EXPECT_EQ(streamed.result.value()["size"], kMiB + 1);
  EXPECT_EQ(streamed.result.value()["sha256"], sha256_hex(content));
}

TEST_F(FsMethodsTest, ReadStreamedRangeReportsFileOffsets) {
  std::string content = pattern(5 * kMiB, 3);
  write_local(path("big"), content);
  std::uint64_t offset = 100, length = 2 * kMiB + kMiB / 2;
  auto read = download({{"path", path("big")}, {"offset", offset}, {"length", length}});
  ASSERT_TRUE(read.result.is_ok()) << read.result.status().to_string();
  EXPECT_TRUE(read.streamed);
  EXPECT_EQ(read.offsets, (std::vector<std::uint64_t>{offset, offset + kMiB, offset + 2 * kMiB}));
  EXPECT_EQ(read.sizes, (std::vector<std::size_t>{kMiB, kMiB, kMiB / 2}));
  EXPECT_EQ(read.content, content.substr(offset, length));
  EXPECT_EQ(read.result.value()["size"], length);
  EXPECT_EQ(read.result.value()["sha256"], sha256_hex(content.substr(offset, length)));
}

TEST_F(FsMethodsTest, ReadErrors) {
  write_local(path("f"), "x");
  EXPECT_ERROR(call("fs.read", {{"path", "relative/f"}}), invalid_request, "params.path: expected an absolute path");
  EXPECT_ERROR(call("fs.read", {{"path", path("f") + std::string(1, '\0') + "x"}}), invalid_request, "params.path: the path holds a NUL byte");
  EXPECT_ERROR(call("fs.read", json::object()), invalid_request, "params.path: required");
  EXPECT_ERROR(call("fs.read", {{"path", 7}}), invalid_request, "params.path: expected a string");
  EXPECT_ERROR(call("fs.read", {{"path", path("missing")}}), not_found, path("missing"));
  EXPECT_ERROR(call("fs.read", {{"path", root_}}), invalid_request, "is a directory");
  EXPECT_ERROR(call("fs.read", {{"path", path("f")}, {"offset", -1}}), invalid_request, "params.offset");
  EXPECT_ERROR(call("fs.read", {{"path", path("f")}, {"length", "all"}}), invalid_request, "params.length");
  EXPECT_ERROR(call("fs.read", {{"path", path("f")}, {"bogus", 1}}), invalid_request, "params.bogus: unknown parameter");
  ASSERT_EQ(::mkfifo(path("fifo").c_str(), 0644), 0);
  EXPECT_ERROR(call("fs.read", {{"path", path("fifo")}}), invalid_request, "not a regular file");
  if (::geteuid() != 0) {
    write_local(path("secret"), "s");
    ::chmod(path("secret").c_str(), 0);
    EXPECT_ERROR(call("fs.read", {{"path", path("secret")}}), permission_denied, path("secret"));
  }
}

// ---- fs.write ------------------------------------------------------------

TEST_F(FsMethodsTest, WriteInlineCreatesFileWithMode) {
  std::string content = "inline content";
  auto result = call("fs.write", {{"path", path("w.txt")}, {"data", rpc::binary(content)}, {"mode", 0600}});
  ASSERT_TRUE(result.is_ok()) << result.status().to_string();
  EXPECT_EQ(result.value()["size"], content.size());
  EXPECT_EQ(result.value()["sha256"], sha256_hex(content));
  EXPECT_EQ(read_local(path("w.txt")), content);
  EXPECT_EQ(mode_of(path("w.txt")), 0600u);

  // The default mode is 0644 whatever the agent's umask; a str is taken as bytes.
  ASSERT_TRUE(call("fs.write", {{"path", path("d.txt")}, {"data", "text"}}).is_ok());
  EXPECT_EQ(read_local(path("d.txt")), "text");
  EXPECT_EQ(mode_of(path("d.txt")), 0644u);
  EXPECT_EQ(names_in(root_), (std::vector<std::string>{"d.txt", "w.txt"}));
}

TEST_F(FsMethodsTest, WriteReplacesExistingContentAndLeavesNoTempFiles) {
  write_local(path("f"), "old old old old");
  std::string content = pattern(3000, 4);
  auto result = call("fs.write", {{"path", path("f")}, {"data", rpc::binary(content)}, {"sha256", sha256_hex(content)},
                                  {"size", content.size()}});
  ASSERT_TRUE(result.is_ok()) << result.status().to_string();
  EXPECT_EQ(read_local(path("f")), content);
  EXPECT_EQ(names_in(root_), std::vector<std::string>{"f"});
}

TEST_F(FsMethodsTest, WriteTakesCallAttachmentsAsContent) {
  std::vector<zmq::message_t> attachments;
  attachments.emplace_back("first,", 6);
  attachments.emplace_back("second", 6);
  auto result = call("fs.write", {{"path", path("att")}, {"sha256", sha256_hex("first,second")}}, &attachments);
  ASSERT_TRUE(result.is_ok()) << result.status().to_string();
  EXPECT_EQ(read_local(path("att")), "first,second");

  std::vector<zmq::message_t> both;
  both.emplace_back("x", 1);
  EXPECT_ERROR(call("fs.write", {{"path", path("att")}, {"data", "y"}}, &both), invalid_request, "params.data");
  EXPECT_EQ(read_local(path("att")), "first,second");
}

TEST_F(FsMethodsTest, WriteParentsFlagCreatesMissingDirectories) {
  EXPECT_ERROR(call("fs.write", {{"path", path("a/b/c.txt")}, {"data", "x"}}), not_found, "pass parents: true");
  EXPECT_FALSE(stdfs::exists(path("a")));
  auto result = call("fs.write", {{"path", path("a/b/c.txt")}, {"data", "x"}, {"parents", true}});
  ASSERT_TRUE(result.is_ok()) << result.status().to_string();
  EXPECT_EQ(read_local(path("a/b/c.txt")), "x");
  EXPECT_TRUE(stdfs::is_directory(path("a/b")));
}

TEST_F(FsMethodsTest, WriteChecksumMismatchLeavesOldContent) {
  write_local(path("keep"), "precious");
  auto result = call("fs.write", {{"path", path("keep")}, {"data", "replacement"}, {"sha256", sha256_hex("something else")}});
  EXPECT_ERROR(result, input_changed, "params.sha256");
  EXPECT_EQ(read_local(path("keep")), "precious");
  EXPECT_EQ(names_in(root_), std::vector<std::string>{"keep"});

  EXPECT_ERROR(call("fs.write", {{"path", path("keep")}, {"data", "replacement"}, {"size", 3}}), input_changed, "params.size");
  EXPECT_EQ(read_local(path("keep")), "precious");
  EXPECT_EQ(names_in(root_), std::vector<std::string>{"keep"});

  // Upper-case hex is the same digest.
  std::string upper = sha256_hex("replacement");
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  ASSERT_TRUE(call("fs.write", {{"path", path("keep")}, {"data", "replacement"}, {"sha256", upper}}).is_ok());
  EXPECT_EQ(read_local(path("keep")), "replacement");
}

TEST_F(FsMethodsTest, StreamedWriteAndRead64MiBVerifiedBothWays) {
  std::string content = pattern(64 * kMiB, 5);
  std::string digest = sha256_hex(content);
  auto started = std::chrono::steady_clock::now();
  auto written = upload({{"path", path("big.bin")}, {"sha256", digest}, {"size", content.size()}, {"mode", 0640}}, content);
  double upload_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  ASSERT_TRUE(written.is_ok()) << written.status().to_string();
  EXPECT_EQ(written.value()["size"], content.size());
  EXPECT_EQ(written.value()["sha256"], digest);
  EXPECT_EQ(mode_of(path("big.bin")), 0640u);
  EXPECT_TRUE(read_local(path("big.bin")) == content);
  EXPECT_EQ(names_in(root_), std::vector<std::string>{"big.bin"});

  started = std::chrono::steady_clock::now();
  auto read = download({{"path", path("big.bin")}});
  double download_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  ASSERT_TRUE(read.result.is_ok()) << read.result.status().to_string();
  EXPECT_EQ(read.offsets.size(), 64u);
  EXPECT_EQ(read.result.value()["size"], content.size());
  EXPECT_EQ(read.result.value()["sha256"], digest);
  EXPECT_EQ(sha256_hex(read.content), digest);
  std::cout << "64 MiB: upload " << 64 / upload_s << " MiB/s, download " << 64 / download_s << " MiB/s\n";
}

TEST_F(FsMethodsTest, StreamedWriteAcceptsUnevenChunksAndBodyData) {
  std::string content = pattern(3 * kMiB + 17, 6);
  auto written = upload({{"path", path("odd")}}, content, 300'001);
  ASSERT_TRUE(written.is_ok()) << written.status().to_string();
  EXPECT_EQ(written.value()["sha256"], sha256_hex(content));
  EXPECT_TRUE(read_local(path("odd")) == content);

  // Bytes may also come in the DATA body; an empty upload makes an empty file.
  auto opened = client_->stream("fs.write", {{"path", path("body")}});
  ASSERT_TRUE(opened.is_ok());
  ASSERT_TRUE((*opened)->send({{"data", rpc::binary("abc")}}).is_ok());
  ASSERT_TRUE((*opened)->send({{"data", rpc::binary("def")}, {"eof", true}}).is_ok());
  while (!(*opened)->ended()) ASSERT_TRUE((*opened)->next().is_ok());
  ASSERT_TRUE((*opened)->result().is_ok()) << (*opened)->result().status().to_string();
  EXPECT_EQ(read_local(path("body")), "abcdef");

  auto empty = upload({{"path", path("empty")}, {"size", 0}}, "");
  ASSERT_TRUE(empty.is_ok()) << empty.status().to_string();
  EXPECT_EQ(read_local(path("empty")), "");
}

TEST_F(FsMethodsTest, StreamedWriteChecksumMismatchLeavesOldContent) {
  write_local(path("target"), "the old content");
  std::string content = pattern(3 * kMiB, 7);
  auto written = upload({{"path", path("target")}, {"sha256", sha256_hex("not this")}}, content);
  EXPECT_ERROR(written, input_changed, "left unchanged");
  EXPECT_EQ(read_local(path("target")), "the old content");
  EXPECT_EQ(names_in(root_), std::vector<std::string>{"target"});

  // Too many bytes for the declared size fails as soon as they arrive.
  written = upload({{"path", path("target")}, {"size", kMiB}}, content);
  EXPECT_ERROR(written, input_changed, "params.size");
  EXPECT_EQ(read_local(path("target")), "the old content");
  EXPECT_EQ(names_in(root_), std::vector<std::string>{"target"});
}

TEST_F(FsMethodsTest, CancelledUploadRemovesItsTempFile) {
  write_local(path("target"), "old");
  auto opened = client_->stream("fs.write", {{"path", path("target")}});
  ASSERT_TRUE(opened.is_ok());
  std::vector<zmq::message_t> chunk;
  chunk.emplace_back("partial", 7);
  ASSERT_TRUE((*opened)->send(json::object(), std::move(chunk)).is_ok());
  ASSERT_TRUE((*opened)->cancel().is_ok());
  while (!(*opened)->ended()) (void)(*opened)->next();
  EXPECT_EQ((*opened)->result().status().code(), ErrorCode::cancelled);
  // The handler notices the cancellation on its next wait for DATA (≤ 1 s).
  auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (names_in(root_).size() > 1 && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(names_in(root_), std::vector<std::string>{"target"});
  EXPECT_EQ(read_local(path("target")), "old");
}

TEST_F(FsMethodsTest, StreamedWriteRejectsMalformedData) {
  write_local(path("target"), "old");
  auto opened = client_->stream("fs.write", {{"path", path("target")}});
  ASSERT_TRUE(opened.is_ok());
  ASSERT_TRUE((*opened)->send({{"eof", "yes"}}).is_ok());
  while (!(*opened)->ended()) (void)(*opened)->next();
  EXPECT_ERROR((*opened)->result(), invalid_request, "eof");
  EXPECT_EQ(read_local(path("target")), "old");
}

TEST_F(FsMethodsTest, WriteErrors) {
  ASSERT_EQ(::mkdir(path("dir").c_str(), 0755), 0);
  write_local(path("file"), "f");
  EXPECT_ERROR(call("fs.write", {{"path", "x.txt"}, {"data", "x"}}), invalid_request, "params.path");
  EXPECT_ERROR(call("fs.write", {{"path", path("x") + std::string(1, '\0')}, {"data", "x"}}), invalid_request, "NUL");
  EXPECT_ERROR(call("fs.write", {{"path", path("dir")}, {"data", "x"}}), invalid_request, "is a directory");
  EXPECT_ERROR(call("fs.write", {{"path", path("file/inner")}, {"data", "x"}}), invalid_request, "not a directory");
  EXPECT_ERROR(call("fs.write", {{"path", path("x")}, {"data", "x"}, {"sha256", "abc"}}), invalid_request, "params.sha256");
  EXPECT_ERROR(call("fs.write", {{"path", path("x")}, {"data", "x"}, {"mode", 01'0000}}), invalid_request, "params.mode");
  EXPECT_ERROR(call("fs.write", {{"path", path("x")}, {"data", 12}}), invalid_request, "params.data");
  EXPECT_ERROR(call("fs.write", {{"path", path("x")}, {"data", "x"}, {"parents", 1}}), invalid_request, "params.parents");
  EXPECT_ERROR(call("fs.write", {{"path", path("x")}, {"data", "x"}, {"size", -2}}), invalid_request, "params.size");
  EXPECT_FALSE(stdfs::exists(path("x")));
  std::string locked = unwritable_dir();
  if (!locked.empty()) {
    EXPECT_ERROR(call("fs.write", {{"path", locked + "/gpubox-fs-test"}, {"data", "x"}}), permission_denied, locked);
  }
  EXPECT_EQ(names_in(root_), (std::vector<std::string>{"dir", "file"}));
}

// ---- fs.list -------------------------------------------------------------

TEST_F(FsMethodsTest, ListDepthOneAndTwo) {
  write_local(path("b.txt"), "12345");
  ::chmod(path("b.txt").c_str(), 0600);
  ASSERT_EQ(::mkdir(path("a").c_str(), 0750), 0);
  write_local(path("a/inner"), "xy");
  ASSERT_EQ(::mkdir(path("a/deeper").c_str(), 0755), 0);
  write_local(path("a/deeper/leaf"), "z");
  ASSERT_EQ(::symlink("b.txt", path("c-link").c_str()), 0);

  auto one = call("fs.list", {{"path", root_}});
  ASSERT_TRUE(one.is_ok()) << one.status().to_string();
  const json& entries = one.value()["entries"];
  ASSERT_EQ(entries.size(), 3u) << entries.dump();
  EXPECT_EQ(entries[0]["path"], path("a"));
  EXPECT_EQ(entries[0]["type"], "dir");
  EXPECT_EQ(entries[0]["mode"], 0750);
  EXPECT_EQ(entries[1]["path"], path("b.txt"));
  EXPECT_EQ(entries[1]["type"], "file");
  EXPECT_EQ(entries[1]["size"], 5);
  EXPECT_EQ(entries[1]["mode"], 0600);
  EXPECT_EQ(entries[2]["path"], path("c-link"));
  EXPECT_EQ(entries[2]["type"], "symlink");
  EXPECT_EQ(one.value()["truncated"], false);
  struct stat st{};
  ::stat(path("b.txt").c_str(), &st);
  EXPECT_NEAR(entries[1]["mtime"].get<double>(), static_cast<double>(st.st_mtim.tv_sec), 1.0);

  auto two = call("fs.list", {{"path", root_ + "/"}, {"depth", 2}});
  ASSERT_TRUE(two.is_ok()) << two.status().to_string();
  std::vector<std::string> paths;
  for (const auto& entry : two.value()["entries"]) paths.push_back(entry["path"]);
  EXPECT_EQ(paths, (std::vector<std::string>{path("a"), path("a/deeper"), path("a/inner"), path("b.txt"), path("c-link")}));

  auto all = call("fs.list", {{"path", root_}, {"depth", 10}});
  ASSERT_TRUE(all.is_ok());
  EXPECT_EQ(all.value()["entries"].size(), 6u);
}

TEST_F(FsMethodsTest, ListDoesNotFollowSymlinkLoops) {
  ASSERT_EQ(::mkdir(path("d").c_str(), 0755), 0);
  ASSERT_EQ(::symlink("..", path("d/up").c_str()), 0);
  ASSERT_EQ(::symlink(root_.c_str(), path("d/root").c_str()), 0);
  ASSERT_EQ(::symlink("self", path("self").c_str()), 0);
  auto result = call("fs.list", {{"path", root_}, {"depth", 50}});
  ASSERT_TRUE(result.is_ok()) << result.status().to_string();
  std::vector<std::string> paths;
  for (const auto& entry : result.value()["entries"]) paths.push_back(entry["path"]);
  EXPECT_EQ(paths, (std::vector<std::string>{path("d"), path("d/root"), path("d/up"), path("self")}));
}

TEST_F(FsMethodsTest, ListErrors) {
  write_local(path("f"), "x");
  EXPECT_ERROR(call("fs.list", {{"path", path("f")}}), invalid_request, "not a directory");
  EXPECT_ERROR(call("fs.list", {{"path", path("missing")}}), not_found, path("missing"));
  EXPECT_ERROR(call("fs.list", {{"path", root_}, {"depth", 0}}), invalid_request, "params.depth");
  EXPECT_ERROR(call("fs.list", {{"path", "."}}), invalid_request, "params.path");
}

// ---- fs.stat -------------------------------------------------------------

TEST_F(FsMethodsTest, StatEachType) {
  write_local(path("f"), "abc");
  ::chmod(path("f").c_str(), 0640);
  ASSERT_EQ(::mkdir(path("d").c_str(), 0700), 0);
  ASSERT_EQ(::symlink("missing-target", path("l").c_str()), 0);
  ASSERT_EQ(::mkfifo(path("p").c_str(), 0600), 0);

  auto file = call("fs.stat", {{"path", path("f")}});
  ASSERT_TRUE(file.is_ok()) << file.status().to_string();
  EXPECT_EQ(file.value()["type"], "file");
  EXPECT_EQ(file.value()["size"], 3);
  EXPECT_EQ(file.value()["mode"], 0640);
  EXPECT_EQ(file.value()["uid"], ::geteuid());
  EXPECT_EQ(file.value()["gid"], ::getegid());
  EXPECT_GT(file.value()["mtime"].get<double>(), 1e9);

  auto dir = call("fs.stat", {{"path", path("d")}});
  ASSERT_TRUE(dir.is_ok());
  EXPECT_EQ(dir.value()["type"], "dir");
  EXPECT_EQ(dir.value()["mode"], 0700);

  auto link = call("fs.stat", {{"path", path("l")}});  // lstat: a dangling link still stats
  ASSERT_TRUE(link.is_ok()) << link.status().to_string();
  EXPECT_EQ(link.value()["type"], "symlink");
  EXPECT_EQ(link.value()["target"], "missing-target");

  auto fifo = call("fs.stat", {{"path", path("p")}});
  ASSERT_TRUE(fifo.is_ok());
  EXPECT_EQ(fifo.value()["type"], "other");

  EXPECT_ERROR(call("fs.stat", {{"path", path("missing")}}), not_found, path("missing"));
  EXPECT_ERROR(call("fs.stat", {{"path", "f"}}), invalid_request, "params.path");
  EXPECT_ERROR(call("fs.stat", {{"path", path("f")}, {"follow", true}}), invalid_request, "params.follow");
}

// ---- fs.mkdir ------------------------------------------------------------

TEST_F(FsMethodsTest, MkdirModesAndParents) {
  ASSERT_TRUE(call("fs.mkdir", {{"path", path("d")}}).is_ok());
  EXPECT_TRUE(stdfs::is_directory(path("d")));
  EXPECT_EQ(mode_of(path("d")), 0755u);

  ASSERT_TRUE(call("fs.mkdir", {{"path", path("private")}, {"mode", 0700}}).is_ok());
  EXPECT_EQ(mode_of(path("private")), 0700u);
  ASSERT_TRUE(call("fs.mkdir", {{"path", path("shared")}, {"mode", 0777}}).is_ok());  // umask does not apply
  EXPECT_EQ(mode_of(path("shared")), 0777u);

  EXPECT_ERROR(call("fs.mkdir", {{"path", path("d")}}), already_exists, "pass parents: true");
  ASSERT_TRUE(call("fs.mkdir", {{"path", path("d")}, {"parents", true}}).is_ok());

  EXPECT_ERROR(call("fs.mkdir", {{"path", path("x/y/z")}}), not_found, "pass parents: true");
  auto nested = call("fs.mkdir", {{"path", path("x/y/z")}, {"parents", true}, {"mode", 0711}});
  ASSERT_TRUE(nested.is_ok()) << nested.status().to_string();
  EXPECT_TRUE(stdfs::is_directory(path("x/y/z")));
  EXPECT_EQ(mode_of(path("x/y/z")), 0711u);
  EXPECT_EQ(mode_of(path("x/y")), 0755u);
}

TEST_F(FsMethodsTest, MkdirErrors) {
  write_local(path("f"), "x");
  EXPECT_ERROR(call("fs.mkdir", {{"path", path("f")}}), already_exists, "not a directory");
  EXPECT_ERROR(call("fs.mkdir", {{"path", path("f")}, {"parents", true}}), already_exists, "not a directory");
  EXPECT_ERROR(call("fs.mkdir", {{"path", path("f/sub")}, {"parents", true}}), invalid_request, "not a directory");
  EXPECT_ERROR(call("fs.mkdir", {{"path", "rel"}}), invalid_request, "params.path");
  EXPECT_ERROR(call("fs.mkdir", {{"path", path("m")}, {"mode", "0755"}}), invalid_request, "params.mode");
  std::string locked = unwritable_dir();
  if (!locked.empty()) {
    EXPECT_ERROR(call("fs.mkdir", {{"path", locked + "/gpubox-fs-test"}}), permission_denied, locked);
  }
}

// ---- fs.remove -----------------------------------------------------------

TEST_F(FsMethodsTest, RemoveFilesLinksAndDirectories) {
  write_local(path("f"), "x");
  ASSERT_TRUE(call("fs.remove", {{"path", path("f")}}).is_ok());
  EXPECT_FALSE(stdfs::exists(path("f")));

  write_local(path("target"), "kept");
  ASSERT_EQ(::symlink(path("target").c_str(), path("link").c_str()), 0);
  ASSERT_TRUE(call("fs.remove", {{"path", path("link")}}).is_ok());
  EXPECT_FALSE(stdfs::is_symlink(path("link")));
  EXPECT_EQ(read_local(path("target")), "kept");

  ASSERT_EQ(::mkdir(path("empty").c_str(), 0755), 0);
  ASSERT_TRUE(call("fs.remove", {{"path", path("empty")}}).is_ok());
  EXPECT_FALSE(stdfs::exists(path("empty")));
}

TEST_F(FsMethodsTest, RemoveRecursiveDoesNotFollowSymlinks) {
  ASSERT_EQ(::mkdir(path("outside").c_str(), 0755), 0);
  write_local(path("outside/keep"), "keep");
  ASSERT_EQ(::mkdir(path("tree").c_str(), 0755), 0);
  ASSERT_EQ(::mkdir(path("tree/sub").c_str(), 0755), 0);
  write_local(path("tree/sub/file"), "x");
  ASSERT_EQ(::symlink(path("outside").c_str(), path("tree/sub/to-outside").c_str()), 0);

  EXPECT_ERROR(call("fs.remove", {{"path", path("tree")}}), invalid_request, "params.recursive");
  EXPECT_TRUE(stdfs::exists(path("tree/sub/file")));

  ASSERT_TRUE(call("fs.remove", {{"path", path("tree")}, {"recursive", true}}).is_ok());
  EXPECT_FALSE(stdfs::exists(path("tree")));
  EXPECT_EQ(read_local(path("outside/keep")), "keep");
}

TEST_F(FsMethodsTest, RemoveErrors) {
  EXPECT_ERROR(call("fs.remove", {{"path", path("missing")}}), not_found, path("missing"));
  EXPECT_ERROR(call("fs.remove", {{"path", path("missing")}, {"recursive", true}}), not_found, path("missing"));
  EXPECT_ERROR(call("fs.remove", {{"path", "/"}, {"recursive", true}}), invalid_request, "refusing");
  EXPECT_ERROR(call("fs.remove", {{"path", "tmp"}}), invalid_request, "params.path");
  EXPECT_ERROR(call("fs.remove", {{"path", path("x")}, {"recursive", "yes"}}), invalid_request, "params.recursive");
}

TEST_F(FsMethodsTest, RemoveRecursiveStopsAtItsDepthLimit) {
  // 2100 nested directories "d/d/d/…": deeper than fs.remove recurses.
  ASSERT_EQ(::mkdir(path("deep").c_str(), 0755), 0);
  int fd = ::open(path("deep").c_str(), O_RDONLY | O_DIRECTORY);
  ASSERT_GE(fd, 0);
  for (int level = 0; level < 2100; ++level) {
    ASSERT_EQ(::mkdirat(fd, "d", 0755), 0);
    int child = ::openat(fd, "d", O_RDONLY | O_DIRECTORY);
    ::close(fd);
    ASSERT_GE(child, 0);
    fd = child;
  }
  ::close(fd);
  EXPECT_ERROR(call("fs.remove", {{"path", path("deep")}, {"recursive", true}}), resource_exhausted, "deeper than");
  // Its deepest part first, then the rest.
  std::string middle = path("deep");
  for (int level = 0; level < 1000; ++level) middle += "/d";
  ASSERT_TRUE(call("fs.remove", {{"path", middle}, {"recursive", true}}).is_ok());
  ASSERT_TRUE(call("fs.remove", {{"path", path("deep")}, {"recursive", true}}).is_ok());
  EXPECT_TRUE(names_in(root_).empty());
}

// ---- fs.move -------------------------------------------------------------

TEST_F(FsMethodsTest, MoveRenamesFilesAndDirectories) {
  write_local(path("a"), "content a");
  ASSERT_TRUE(call("fs.move", {{"from", path("a")}, {"to", path("b")}}).is_ok());
  EXPECT_FALSE(stdfs::exists(path("a")));
  EXPECT_EQ(read_local(path("b")), "content a");

  ASSERT_EQ(::mkdir(path("dir").c_str(), 0755), 0);
  write_local(path("dir/inner"), "i");
  ASSERT_TRUE(call("fs.move", {{"from", path("dir")}, {"to", path("moved")}}).is_ok());
  EXPECT_EQ(read_local(path("moved/inner")), "i");
  EXPECT_FALSE(stdfs::exists(path("dir")));
}

TEST_F(FsMethodsTest, MoveOverwriteFlag) {
  write_local(path("src"), "new");
  write_local(path("dst"), "old");
  EXPECT_ERROR(call("fs.move", {{"from", path("src")}, {"to", path("dst")}}), already_exists, "pass overwrite: true");
  EXPECT_EQ(read_local(path("src")), "new");
  EXPECT_EQ(read_local(path("dst")), "old");
  ASSERT_TRUE(call("fs.move", {{"from", path("src")}, {"to", path("dst")}, {"overwrite", true}}).is_ok());
  EXPECT_EQ(read_local(path("dst")), "new");
  EXPECT_FALSE(stdfs::exists(path("src")));

  // A directory replaces only an empty directory.
  ASSERT_EQ(::mkdir(path("d1").c_str(), 0755), 0);
  write_local(path("d1/x"), "x");
  ASSERT_EQ(::mkdir(path("d2").c_str(), 0755), 0);
  ASSERT_TRUE(call("fs.move", {{"from", path("d1")}, {"to", path("d2")}, {"overwrite", true}}).is_ok());
  EXPECT_EQ(read_local(path("d2/x")), "x");
  ASSERT_EQ(::mkdir(path("d3").c_str(), 0755), 0);
  EXPECT_ERROR(call("fs.move", {{"from", path("d3")}, {"to", path("d2")}, {"overwrite", true}}), invalid_request, "not empty");
}

TEST_F(FsMethodsTest, MoveErrors) {
  write_local(path("f"), "f");
  ASSERT_EQ(::mkdir(path("d").c_str(), 0755), 0);
  EXPECT_ERROR(call("fs.move", {{"from", path("missing")}, {"to", path("x")}}), not_found, "params.from");
  EXPECT_ERROR(call("fs.move", {{"from", path("f")}, {"to", path("no/such/dir")}}), not_found, "params.to");
  EXPECT_ERROR(call("fs.move", {{"from", path("d")}, {"to", path("d/inside")}}), invalid_request, "into itself");
  EXPECT_ERROR(call("fs.move", {{"from", path("f")}, {"to", path("d")}, {"overwrite", true}}), invalid_request, "is a directory");
  EXPECT_ERROR(call("fs.move", {{"from", path("d")}, {"to", path("f")}, {"overwrite", true}}), invalid_request, "params.to");
  EXPECT_ERROR(call("fs.move", {{"from", "f"}, {"to", path("x")}}), invalid_request, "params.from");
  EXPECT_ERROR(call("fs.move", {{"from", path("f")}}), invalid_request, "params.to: required");
  EXPECT_EQ(read_local(path("f")), "f");
  EXPECT_TRUE(stdfs::is_directory(path("d")));
}

TEST_F(FsMethodsTest, MoveAcrossFilesystemsCopiesThenRemoves) {
  struct stat here{}, shm{};
  if (::stat(root_.c_str(), &here) != 0 || ::stat("/dev/shm", &shm) != 0 || here.st_dev == shm.st_dev) {
    GTEST_SKIP() << "needs /dev/shm on another filesystem than " << root_;
  }
  std::string tmpl = "/dev/shm/gpubox-fs-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
  std::string other = tmpl;
  std::string content = pattern(3 * kMiB + 5, 8);
  write_local(path("file"), content);
  ::chmod(path("file").c_str(), 0604);
  ASSERT_EQ(::mkdir(path("tree").c_str(), 0750), 0);
  ASSERT_EQ(::mkdir(path("tree/sub").c_str(), 0755), 0);
  write_local(path("tree/sub/leaf"), "leaf");
  ASSERT_EQ(::symlink("sub/leaf", path("tree/link").c_str()), 0);

  auto moved = call("fs.move", {{"from", path("file")}, {"to", other + "/file"}});
  EXPECT_TRUE(moved.is_ok()) << moved.status().to_string();
  EXPECT_FALSE(stdfs::exists(path("file")));
  EXPECT_TRUE(read_local(other + "/file") == content);
  EXPECT_EQ(mode_of(other + "/file"), 0604u);

  moved = call("fs.move", {{"from", path("tree")}, {"to", other + "/tree"}});
  EXPECT_TRUE(moved.is_ok()) << moved.status().to_string();
  EXPECT_FALSE(stdfs::exists(path("tree")));
  EXPECT_EQ(mode_of(other + "/tree"), 0750u);
  EXPECT_EQ(read_local(other + "/tree/sub/leaf"), "leaf");
  EXPECT_EQ(stdfs::read_symlink(other + "/tree/link"), "sub/leaf");

  // Back, onto an existing file: refused without overwrite, replaced with it.
  write_local(path("file"), "old");
  EXPECT_ERROR(call("fs.move", {{"from", other + "/file"}, {"to", path("file")}}), already_exists, "overwrite");
  ASSERT_TRUE(call("fs.move", {{"from", other + "/file"}, {"to", path("file")}, {"overwrite", true}}).is_ok());
  EXPECT_TRUE(read_local(path("file")) == content);
  // A directory replaces only an empty directory, across filesystems too.
  ASSERT_EQ(::mkdir(path("full").c_str(), 0755), 0);
  write_local(path("full/x"), "x");
  EXPECT_ERROR(call("fs.move", {{"from", other + "/tree"}, {"to", path("full")}, {"overwrite", true}}), invalid_request, "not empty");
  EXPECT_EQ(read_local(other + "/tree/sub/leaf"), "leaf");
  ASSERT_TRUE(call("fs.remove", {{"path", path("full")}, {"recursive", true}}).is_ok());
  EXPECT_EQ(names_in(other), std::vector<std::string>{"tree"});
  EXPECT_EQ(names_in(root_), std::vector<std::string>{"file"});  // no staging leftovers
  std::error_code ignored;
  stdfs::remove_all(other, ignored);
}

// ---- flow control --------------------------------------------------------

TEST_F(FsMethodsTest, SlowReaderDoesNotMakeTheAgentBuffer) {
  constexpr std::uint64_t kSize = 256 * kMiB;
  {
    int fd = ::open(path("huge").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::ftruncate(fd, static_cast<off_t>(kSize)), 0);  // sparse: zeros without the disk
    ASSERT_EQ(::pwrite(fd, "head", 4, 0), 4);
    ::close(fd);
  }
  long baseline = rss_kib();
  ASSERT_GT(baseline, 0);
  long peak = baseline;
  std::size_t chunks = 0;
  auto read = download({{"path", path("huge")}}, 2, [&] {
    ++chunks;
    peak = std::max(peak, rss_kib());
    std::this_thread::sleep_for(milliseconds(3));  // a reader slower than the agent
  });
  ASSERT_TRUE(read.result.is_ok()) << read.result.status().to_string();
  EXPECT_EQ(chunks, 256u);
  EXPECT_EQ(read.content.size(), kSize);
  EXPECT_EQ(read.result.value()["sha256"], sha256_hex(read.content));
  EXPECT_EQ(read.content.substr(0, 4), "head");
  // Window 2 × 1 MiB chunks: the agent holds a few MiB, not the file.
  // (Under ASan freed chunks sit in its quarantine, so RSS says nothing.)
#ifndef GPUBOX_SANITIZE
  EXPECT_LT(peak - baseline, 32 * 1024) << "baseline " << baseline << " KiB, peak " << peak << " KiB";
#endif
  std::cout << "agent VmRSS: baseline " << baseline << " KiB, peak while reading " << peak << " KiB\n";
}

TEST_F(FsMethodsTest, CancelledReadStopsStreaming) {
  int fd = ::open(path("huge").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, static_cast<off_t>(64 * kMiB)), 0);
  ::close(fd);
  rpc::CallOptions options;
  options.window = 2;
  options.wait = std::chrono::seconds(60);
  auto opened = client_->stream("fs.read", {{"path", path("huge")}}, std::move(options));
  ASSERT_TRUE(opened.is_ok());
  auto first = (*opened)->next();
  ASSERT_TRUE(first.is_ok() && first->has_value());
  ASSERT_TRUE((*opened)->cancel().is_ok());
  std::size_t more = 0;
  while (!(*opened)->ended()) {
    auto next = (*opened)->next();
    if (next.is_ok() && next->has_value()) ++more;
  }
  EXPECT_LT(more, 8u);
  EXPECT_EQ((*opened)->result().status().code(), ErrorCode::cancelled);
  // The agent is still serving.
  EXPECT_TRUE(call("fs.stat", {{"path", path("huge")}}).is_ok());
}

}  // namespace
}  // namespace gpubox
