// The kernel's pure parts: executor frames, history replies, the execution
// counter, the `kernel` config section and the `kernel` command-line mode.
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <thread>

#include "agent/command_line.h"
#include "agent/config.h"
#include "kernel/execution_counter.h"
#include "kernel/frame_channel.h"
#include "kernel/json_writer.h"
#include "kernel/kernel_history.h"

namespace gpubox {
namespace {

using ::testing::HasSubstr;

TEST(FrameChannel, FramesSurviveArbitrarySplitsAndOrder) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
  std::string big(300000, 'x');
  ASSERT_TRUE(kernel::write_frame(sv[0], "{\"a\":1}").is_ok());
  ASSERT_TRUE(kernel::write_frame(sv[0], "").is_ok());
  kernel::FrameReader reader;
  std::string payload;
  std::vector<std::string> got;
  std::thread writer([&] { ASSERT_TRUE(kernel::write_frame(sv[0], big).is_ok()); });
  while (got.size() < 3) {
    reader.fill(sv[1]);
    while (reader.next(payload)) got.push_back(payload);
  }
  writer.join();
  EXPECT_EQ(got[0], "{\"a\":1}");
  EXPECT_EQ(got[1], "");
  EXPECT_EQ(got[2], big);
  ::close(sv[0]);
  EXPECT_EQ(reader.fill(sv[1]), kernel::FrameReader::Fill::eof);
  ::close(sv[1]);
}

TEST(FrameChannel, WritesToAPipeAndFailsCleanlyOnAClosedPeer) {
  int p[2];
  ASSERT_EQ(::pipe2(p, O_NONBLOCK), 0);
  ASSERT_TRUE(kernel::write_frame(p[1], "{\"on\":\"a pipe\"}").is_ok());  // not a socket: written as such
  kernel::FrameReader reader;
  std::string payload;
  reader.fill(p[0]);
  ASSERT_TRUE(reader.next(payload));
  EXPECT_EQ(payload, "{\"on\":\"a pipe\"}");
  ::close(p[0]);
  ::close(p[1]);
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  ::close(sv[1]);
  // A dead executor: an error, not a SIGPIPE that would end the kernel.
  EXPECT_FALSE(kernel::write_frame(sv[0], "{}").is_ok());
  ::close(sv[0]);
}

TEST(JsonWriter, WritesWhatNlohmannWrites) {
  using nlohmann::json;
  const auto replace = json::error_handler_t::replace;
  std::string bad_utf8[] = {std::string("a\xff" "b"), std::string("a\xe2\x82" "b"), std::string("\xed\xa0\x80x"),
                            std::string("\xc0\xafz"), std::string("\xf4\x90\x80\x80q"), std::string("end\xe2\x82")};
  std::vector<json> values = {
      json{{"name", "stdout"}, {"text", std::string(300000, 'x') + "\n"}},
      json{{"text", "quote \" backslash \\ tab \t nl \n cr \r bell \x07 \x1f del \x7f"}},
      json{{"unicode", "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"}, {"k\"ey", {1, 2.5, -3, true, nullptr, "s"}}},
      json{{"nested", {{"a", json::array()}, {"b", json::object()}, {"c", {{"d", 1e300}}}}}},
      json::array({1, "two", json{{"three", 3}}}), json("scalar"), json(42), json(nullptr)};
  for (const auto& text : bad_utf8) values.push_back(json{{"text", text}});
  for (const auto& value : values) {
    std::string ours;
    kernel::append_json(ours, value, replace);
    EXPECT_EQ(ours, value.dump(-1, ' ', false, replace));
    std::string ignored;
    kernel::append_json(ignored, value, json::error_handler_t::ignore);
    EXPECT_EQ(ignored, value.dump(-1, ' ', false, json::error_handler_t::ignore));
  }
  // Every special byte at every offset around the eight-byte fast path's boundaries.
  for (const std::string special : {"\"", "\\", "\n", "\x01", "\x80", "\xc3\xa9", "\xf0\x9f\x98\x80", "\xe2\x82"}) {
    for (size_t length = 0; length < 20; ++length) {
      for (size_t at = 0; at <= length; ++at) {
        std::string text = std::string(at, 'a') + special + std::string(length - at, 'b');
        std::string ours;
        kernel::append_json(ours, json(text), replace);
        ASSERT_EQ(ours, json(text).dump(-1, ' ', false, replace)) << length << " " << at;
      }
    }
  }
  std::string strict;
  EXPECT_THROW(kernel::append_json(strict, json{{"text", bad_utf8[0]}}, json::error_handler_t::strict), json::type_error);
}

TEST(FrameChannel, OversizedLengthIsRefusedNotAllocated) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv), 0);
  const unsigned char huge[4] = {0xff, 0xff, 0xff, 0xff};
  ASSERT_EQ(::write(sv[0], huge, 4), 4);
  kernel::FrameReader reader;
  reader.fill(sv[1]);
  std::string payload;
  EXPECT_FALSE(reader.next(payload));
  EXPECT_TRUE(reader.oversized());
  ::close(sv[0]);
  ::close(sv[1]);
}

TEST(FrameChannel, WellFormedFrameChecksTheTypeOfEveryFieldTheAgentReads) {
  using nlohmann::json;
  std::string why;
  EXPECT_TRUE(kernel::well_formed_frame(json{{"type", "display"}, {"data", json::object()}, {"extra", 1}}, &why));
  EXPECT_FALSE(kernel::well_formed_frame(json::array({1}), &why));
  EXPECT_EQ(why, "a frame must be a JSON object");
  EXPECT_FALSE(kernel::well_formed_frame(json{{"type", 5}}, &why));
  EXPECT_EQ(why, "\"type\" must be a string");
  EXPECT_FALSE(kernel::well_formed_frame(json{{"type", "input_request"}, {"prompt", 5}}, &why));
  EXPECT_EQ(why, "\"prompt\" must be a string");
  EXPECT_FALSE(kernel::well_formed_frame(json{{"type", "clear_output"}, {"wait", "yes"}}, &why));
  EXPECT_EQ(why, "\"wait\" must be a boolean");
  EXPECT_FALSE(kernel::well_formed_frame(json{{"type", "display"}, {"data", 5}}, &why));
  EXPECT_EQ(why, "\"data\" must be an object");
  EXPECT_FALSE(kernel::well_formed_frame(json{{"type", "error"}, {"traceback", {"ok", 3}}}, &why));
  EXPECT_EQ(why, "\"traceback\" must be an array of strings");
  EXPECT_FALSE(kernel::well_formed_frame(json{{"type", "execute_result"}, {"ack", 0}}, &why));
  EXPECT_EQ(why, "\"ack\" must be a boolean");
  EXPECT_FALSE(kernel::well_formed_frame(json{{"type", "done"}, {"payload", "exit"}}, &why));
  EXPECT_EQ(why, "\"payload\" must be an array");
}

TEST(KernelHistory, RowsAreIntegerTriplesNumberedLikeExecutionCounts) {
  kernel::KernelHistory history;
  xeus::xhistory_manager& manager = history;
  manager.store_inputs(0, 1, "a = 1");
  manager.store_inputs(0, 1, "b = 2");
  manager.store_inputs(0, 1, "a + b");
  auto tail = manager.process_request({{"hist_access_type", "tail"}, {"n", 2}, {"raw", true}, {"output", false}});
  ASSERT_EQ(tail["history"].size(), 2u);
  EXPECT_EQ(tail["history"][0], nlohmann::json::array({1, 2, "b = 2"}));
  EXPECT_EQ(tail["history"][1], nlohmann::json::array({1, 3, "a + b"}));
  auto range = manager.process_request(
      {{"hist_access_type", "range"}, {"session", 1}, {"start", 1}, {"stop", 2}, {"raw", true}, {"output", false}});
  EXPECT_EQ(range["history"], nlohmann::json::array({nlohmann::json::array({1, 1, "a = 1"})}));
  auto search = manager.process_request({{"hist_access_type", "search"}, {"pattern", "?*= ?"}, {"n", 10},
                                         {"unique", true}, {"raw", true}, {"output", false}});
  EXPECT_EQ(search["history"].size(), 2u);
}

TEST(ExecutionCounter, JupyterAndRpcCellsShareOneCountThatARestartResets) {
  int restarts = 0;
  kernel::ExecutionCounter counter([&restarts] { return restarts; });
  EXPECT_EQ(counter.next(), 1);                 // an RPC cell
  EXPECT_EQ(counter.assign("jupyter-a"), 2);    // a Jupyter cell as the server takes it
  EXPECT_EQ(counter.count_of("jupyter-a"), 2);
  EXPECT_EQ(counter.next(), 3);                 // an RPC cell while it waits: the Jupyter cell keeps 2
  EXPECT_EQ(counter.count_of("jupyter-a"), 2);
  EXPECT_EQ(counter.count_of("another"), 0);
  EXPECT_EQ(counter.count_of(""), 0);
  EXPECT_EQ(counter.assign("jupyter-b"), 4);
  EXPECT_EQ(counter.count_of("jupyter-a"), 0);  // only the cell being served is remembered
  restarts = 1;                                 // a fresh executor starts again at 1
  EXPECT_EQ(counter.assign("jupyter-c"), 1);
  EXPECT_EQ(counter.next(), 2);
}

TEST(KernelConfig, DefaultsAndOverrides) {
  auto defaults = parse_config("{}");
  ASSERT_TRUE(defaults.is_ok());
  EXPECT_TRUE(defaults->kernel.enabled);
  EXPECT_EQ(defaults->kernel.python, "python3");
  auto config = parse_config(R"({"kernel": {"enabled": false, "python": "/opt/py/bin/python3", "mode": "plain",
      "setup_code": ["import os"], "preload": true, "execute_timeout_seconds": 2.5, "connection_file": "/tmp/k.json"}})");
  ASSERT_TRUE(config.is_ok()) << config.status().message();
  EXPECT_FALSE(config->kernel.enabled);
  EXPECT_EQ(config->kernel.mode, "plain");
  EXPECT_EQ(config->kernel.setup_code, std::vector<std::string>{"import os"});
  EXPECT_EQ(config->kernel.execute_timeout, std::chrono::milliseconds(2500));
  EXPECT_THAT(config_to_json(*config), HasSubstr("/opt/py/bin/python3"));
}

TEST(KernelConfig, BadValuesNameTheField) {
  auto error = [](const char* text) { return parse_config(text).status().message(); };
  EXPECT_THAT(error(R"({"kernel": {"mode": "fast"}})"), HasSubstr("kernel.mode"));
  EXPECT_THAT(error(R"({"kernel": {"setup_code": "x"}})"), HasSubstr("kernel.setup_code"));
  EXPECT_THAT(error(R"({"kernel": {"setup_code": [1]}})"), HasSubstr("kernel.setup_code[0]"));
  EXPECT_THAT(error(R"({"kernel": {"python": ""}})"), HasSubstr("kernel.python"));
  EXPECT_THAT(error(R"({"kernel": {"connection_file": "rel.json"}})"), HasSubstr("kernel.connection_file"));
  EXPECT_THAT(error(R"({"kernel": {"colour": 1}})"), HasSubstr("kernel.colour: unknown key"));
}

TEST(KernelCommandLine, ModeAndFlags) {
  auto line = parse_command_line({"kernel", "-f", "/tmp/c.json", "--python", "/usr/bin/python3", "--plain"}, nullptr);
  ASSERT_TRUE(line.is_ok());
  EXPECT_EQ(line->mode, CommandLine::Mode::kernel);
  EXPECT_EQ(line->kernel_connection_file, "/tmp/c.json");
  EXPECT_EQ(line->kernel_python, "/usr/bin/python3");
  EXPECT_TRUE(line->kernel_plain);
  EXPECT_THAT(parse_command_line({"kernel"}, nullptr).status().message(), HasSubstr("-f CONNECTION_FILE is required"));
  EXPECT_THAT(parse_command_line({"kernel", "-f"}, nullptr).status().message(), HasSubstr("expected a value"));
  EXPECT_THAT(parse_command_line({"kernel", "-f", "x", "--debug"}, nullptr).status().message(), HasSubstr("--debug"));
}

}  // namespace
}  // namespace gpubox
