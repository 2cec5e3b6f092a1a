// agent/log.h: one valid JSON object per line, ts/level/msg first, secrets
// never printed, and whatever bytes a message holds escaped.
#include "agent/log.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <regex>
#include <sstream>

#include "tests/unit/temp_dir.h"

namespace gpubox::log {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

nlohmann::ordered_json parse_line(const std::string& line) {
  EXPECT_EQ(line.find('\n'), std::string::npos) << "a log line must be one line: " << line;
  try {
    return nlohmann::ordered_json::parse(line);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not JSON (" << e.what() << "): " << line;
    return nullptr;
  }
}

std::vector<std::string> keys_of(const nlohmann::ordered_json& object) {
  std::vector<std::string> keys;
  for (const auto& [key, value] : object.items()) keys.push_back(key);
  return keys;
}

TEST(FormatLine, TsLevelMsgFirstThenFieldsInOrder) {
  std::string line = format_line(Level::warn, "child exited", {{"child", "kernel"}, {"pid", 42}, {"ok", false}});
  auto object = parse_line(line);
  EXPECT_THAT(keys_of(object), ElementsAre("ts", "level", "msg", "child", "pid", "ok"));
  EXPECT_EQ(object["level"], "warn");
  EXPECT_EQ(object["msg"], "child exited");
  EXPECT_EQ(object["child"], "kernel");
  EXPECT_EQ(object["pid"], 42);
  EXPECT_EQ(object["ok"], false);
  // ts is UTC ISO 8601 with microseconds.
  std::string ts = object["ts"];
  EXPECT_TRUE(std::regex_match(ts, std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z)"))) << ts;
  // The text itself starts with ts: greppable and sortable.
  EXPECT_EQ(line.rfind(R"({"ts":")", 0), 0u) << line;
}

TEST(FormatLine, EveryLevelHasItsName) {
  const std::pair<Level, const char*> levels[] = {{Level::trace, "trace"}, {Level::debug, "debug"},
                                                  {Level::info, "info"},   {Level::warn, "warn"},
                                                  {Level::error, "error"}};
  for (const auto& [level, name] : levels) EXPECT_EQ(parse_line(format_line(level, "m", {}))["level"], name);
}

TEST(FormatLine, EveryFieldTypeKeepsItsJsonType) {
  std::string owned = "owned";
  std::string_view view = "view";
  const char* null_text = nullptr;
  auto object = parse_line(format_line(Level::info, "types",
                                       {{"string", owned},
                                        {"view", view},
                                        {"cstr", "literal"},
                                        {"null_cstr", null_text},
                                        {"ll", 1LL << 40},
                                        {"int", -3},
                                        {"unsigned", 7u},
                                        {"double", 0.5},
                                        {"bool", true}}));
  EXPECT_EQ(object["string"], "owned");
  EXPECT_EQ(object["view"], "view");
  EXPECT_EQ(object["cstr"], "literal");
  EXPECT_EQ(object["null_cstr"], "");
  EXPECT_EQ(object["ll"], 1LL << 40);
  EXPECT_EQ(object["int"], -3);
  EXPECT_EQ(object["unsigned"], 7u);
  EXPECT_EQ(object["double"], 0.5);
  EXPECT_EQ(object["bool"], true);
  EXPECT_TRUE(object["bool"].is_boolean());
  EXPECT_TRUE(object["int"].is_number_integer());
}

TEST(FormatLine, SecretsAreRedacted) {
  std::string line = format_line(Level::error, "token rejected",
                                 {{"token", Secret{"hf_SuperSecretValue"}}, {"user", "alice"}});
  EXPECT_THAT(line, Not(HasSubstr("hf_SuperSecretValue")));
  EXPECT_THAT(line, Not(HasSubstr("SuperSecret")));
  auto object = parse_line(line);
  EXPECT_EQ(object["token"], "[redacted]");
  EXPECT_EQ(object["user"], "alice");
  // An empty secret is redacted too: even its emptiness is not disclosed.
  EXPECT_EQ(parse_line(format_line(Level::info, "m", {{"s", Secret{""}}}))["s"], "[redacted]");
}

TEST(FormatLine, EscapesQuotesNewlinesAndControlBytes) {
  std::string message = "say \"hi\"\nthen\tleave\\ \x01 \x7f";
  std::string line = format_line(Level::info, message, {{"field\"with\nnewline", "v\r\n"}});
  EXPECT_EQ(line.find('\n'), std::string::npos);
  EXPECT_EQ(line.find('\r'), std::string::npos);
  EXPECT_EQ(line.find('\x01'), std::string::npos);
  auto object = parse_line(line);
  EXPECT_EQ(object["msg"], message);
  EXPECT_EQ(object["field\"with\nnewline"], "v\r\n");
}

TEST(FormatLine, InvalidUtf8IsReplacedNotDropped) {
  std::string line = format_line(Level::info, "bad \xff\xfe bytes", {{"path", std::string("/tmp/\xc3(x")}});
  auto object = parse_line(line);
  ASSERT_TRUE(object.is_object());
  EXPECT_EQ(line.find('\xff'), std::string::npos);
  EXPECT_EQ(object["msg"], "bad \xEF\xBF\xBD\xEF\xBF\xBD bytes");  // U+FFFD for each bad byte
  EXPECT_EQ(object["path"], "/tmp/\xEF\xBF\xBD(x");
  // Valid UTF-8 is kept as it is.
  EXPECT_EQ(parse_line(format_line(Level::info, "caf\xc3\xa9 \xe2\x9c\x93", {}))["msg"], "caf\xc3\xa9 \xe2\x9c\x93");
}

TEST(ParseLevel, AcceptsExactlyTheSixNames) {
  const std::pair<const char*, Level> levels[] = {{"trace", Level::trace}, {"debug", Level::debug},
                                                  {"info", Level::info},   {"warn", Level::warn},
                                                  {"error", Level::error}, {"off", Level::off}};
  for (const auto& [name, expected] : levels) {
    Level level = Level::off;
    if (expected == Level::off) level = Level::info;
    EXPECT_TRUE(parse_level(name, &level)) << name;
    EXPECT_EQ(level, expected) << name;
  }
  for (const char* bad : {"", "INFO", "warning", "err", "info ", "fatal"}) {
    Level level = Level::debug;
    EXPECT_FALSE(parse_level(bad, &level)) << bad;
    EXPECT_EQ(level, Level::debug) << "a refused name changed the level: " << bad;
  }
}

class LogFileTest : public ::testing::Test {
 protected:
  void TearDown() override {
    Options quiet;
    quiet.level = Level::warn;
    quiet.to_stderr = true;
    configure(quiet, nullptr);
  }
  test::TempDir dir_;
};

TEST_F(LogFileTest, WritesOneJsonLinePerCallAtOrAboveTheLevel) {
  Options options;
  options.level = Level::info;
  options.to_stderr = false;
  options.file = dir_.file("agent.log");
  std::string error;
  ASSERT_TRUE(configure(options, &error)) << error;
  debug("too low");
  info("first", {{"n", 1}});
  warn("second", {{"key", Secret{"do-not-print"}}});
  log::error("third");
  flush();

  std::string text = test::TempDir::read(options.file);
  EXPECT_THAT(text, Not(HasSubstr("too low")));
  EXPECT_THAT(text, Not(HasSubstr("do-not-print")));
  std::istringstream lines(text);
  std::vector<std::string> messages;
  for (std::string line; std::getline(lines, line);) messages.push_back(parse_line(line)["msg"]);
  EXPECT_THAT(messages, ElementsAre("first", "second", "third"));
}

TEST_F(LogFileTest, LevelOffWritesNothing) {
  Options options;
  options.level = Level::off;
  options.to_stderr = false;
  options.file = dir_.file("agent.log");
  ASSERT_TRUE(configure(options, nullptr));
  log::error("not even errors");
  flush();
  EXPECT_EQ(test::TempDir::read(options.file), "");
}

TEST_F(LogFileTest, UnopenableFileIsReported) {
  Options options;
  options.level = Level::info;
  options.to_stderr = false;
  options.file = dir_.file("no/such/dir/agent.log");
  // spdlog creates missing parent directories; a file where a directory must be is fatal.
  dir_.write("no", "a plain file");
  std::string error;
  EXPECT_FALSE(configure(options, &error));
  EXPECT_FALSE(error.empty());
}

}  // namespace
}  // namespace gpubox::log
