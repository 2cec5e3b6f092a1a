// agent/command_line.h: modes, the main command after "--", flags over the
// config document, and where that document comes from.
#include "agent/command_line.h"

#include <fcntl.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/unit/temp_dir.h"

namespace gpubox {
namespace {

using namespace std::chrono_literals;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;

Result<CommandLine> parse(const std::vector<std::string>& args, const char* env_config = nullptr) {
  return parse_command_line(args, env_config);
}

std::string error_of(const std::vector<std::string>& args, const char* env_config = nullptr) {
  auto line = parse(args, env_config);
  if (line.is_ok()) {
    ADD_FAILURE() << "accepted";
    return {};
  }
  return line.status().message();
}

TEST(CommandLine, NoArgumentsRunsWithTheDefaults) {
  auto line = parse({});
  ASSERT_TRUE(line) << line.status().to_string();
  EXPECT_EQ(line->mode, CommandLine::Mode::run);
  EXPECT_TRUE(line->command.empty());
  EXPECT_EQ(line->ready_fd, -1);
  EXPECT_EQ(line->config.state_dir, "/run/gpubox");
  EXPECT_EQ(line->config.shutdown_grace, 10s);
}

TEST(CommandLine, VersionAndHelpModes) {
  auto version = parse({"--version"});
  ASSERT_TRUE(version);
  EXPECT_EQ(version->mode, CommandLine::Mode::version);
  auto help = parse({"--help"});
  ASSERT_TRUE(help);
  EXPECT_EQ(help->mode, CommandLine::Mode::help);
  auto short_help = parse({"-h"});
  ASSERT_TRUE(short_help);
  EXPECT_EQ(short_help->mode, CommandLine::Mode::help);
  // They win over a config that would not parse: --help must always work.
  auto with_bad_config = parse({"--help"}, "{not json");
  ASSERT_TRUE(with_bad_config);
  EXPECT_EQ(with_bad_config->mode, CommandLine::Mode::help);
  auto after_flags = parse({"--state-dir", "/x", "--version"});
  ASSERT_TRUE(after_flags);
  EXPECT_EQ(after_flags->mode, CommandLine::Mode::version);
  EXPECT_THAT(std::string(kUsage), HasSubstr("--ready-fd"));
  EXPECT_THAT(std::string(kUsage), HasSubstr("--check-config"));
}

TEST(CommandLine, EverythingAfterDoubleDashIsTheCommand) {
  auto line = parse({"--state-dir", "/s", "--", "sh", "-c", "exit 3", "--version", "--"});
  ASSERT_TRUE(line) << line.status().to_string();
  EXPECT_EQ(line->mode, CommandLine::Mode::run);
  EXPECT_THAT(line->command, ElementsAre("sh", "-c", "exit 3", "--version", "--"));
  EXPECT_EQ(line->config.state_dir, "/s");
}

TEST(CommandLine, DoubleDashWithoutACommandIsAnError) {
  auto line = parse({"--"});
  ASSERT_FALSE(line);
  EXPECT_EQ(line.status().code(), ErrorCode::invalid_request);
  EXPECT_EQ(line.status().message(), "--: expected a command after it");
}

TEST(CommandLine, UnknownOptionIsAnError) {
  EXPECT_EQ(error_of({"--bogus"}), "--bogus: unknown option (see --help)");
  EXPECT_EQ(error_of({"--state-dir", "/s", "-x"}), "-x: unknown option (see --help)");
  // A command must follow "--": a bare word is not one.
  EXPECT_EQ(error_of({"sleep", "1"}), "sleep: unknown option (see --help)");
}

TEST(CommandLine, FlagWithoutItsValueIsAnError) {
  for (const char* flag : {"--config", "--state-dir", "--log-level", "--grace-seconds", "--ready-fd"}) {
    EXPECT_EQ(error_of({flag}), std::string(flag) + ": expected a value");
  }
}

TEST(CommandLine, FlagsOverrideTheConfigFile) {
  test::TempDir dir;
  std::string path = dir.write("config.json", R"({
    "state_dir": "/from/file",
    "log": {"level": "debug", "stderr": false},
    "shutdown": {"grace_seconds": 5},
    "env": {"A": "1"}
  })");
  auto line = parse({"--state-dir", "/from/flag", "--config", path, "--grace-seconds", "7.5", "--log-level", "error"});
  ASSERT_TRUE(line) << line.status().to_string();
  EXPECT_EQ(line->config.state_dir, "/from/flag");
  EXPECT_EQ(line->config.shutdown_grace, 7500ms);
  EXPECT_EQ(line->config.log_level, log::Level::error);
  // What no flag names still comes from the file.
  EXPECT_FALSE(line->config.log_stderr);
  EXPECT_EQ(line->config.env.at("A"), "1");

  auto file_only = parse({"--config", path});
  ASSERT_TRUE(file_only);
  EXPECT_EQ(file_only->config.state_dir, "/from/file");
  EXPECT_EQ(file_only->config.shutdown_grace, 5s);
  EXPECT_EQ(file_only->config.log_level, log::Level::debug);
}

TEST(CommandLine, FlagValuesAreValidatedLikeTheConfig) {
  EXPECT_THAT(error_of({"--grace-seconds", "abc"}),
              HasSubstr(R"(shutdown.grace_seconds: expected a number from 0 to 3600, got "abc")"));
  EXPECT_THAT(error_of({"--grace-seconds", "3601"}), HasSubstr("shutdown.grace_seconds: expected a number from 0 to 3600, got 3601"));
  EXPECT_THAT(error_of({"--log-level", "loud"}), HasSubstr(R"(log.level: expected one of)"));
  EXPECT_THAT(error_of({"--state-dir", "relative"}), HasSubstr(R"(state_dir: expected an absolute path, got "relative")"));
  // Without a file or GPUBOX_CONFIG, the source named is the flags.
  EXPECT_THAT(error_of({"--state-dir", "relative"}), StartsWith("config (flags): "));
}

TEST(CommandLine, UnreadableConfigFileNamesThePath) {
  test::TempDir dir;
  std::string missing = dir.file("missing.json");
  auto line = parse({"--config", missing});
  ASSERT_FALSE(line);
  EXPECT_EQ(line.status().code(), ErrorCode::not_found);
  EXPECT_THAT(line.status().message(), HasSubstr("'" + missing + "'"));
  EXPECT_THAT(line.status().message(), StartsWith("config: cannot read"));
  // A file given explicitly is never silently replaced by GPUBOX_CONFIG.
  EXPECT_FALSE(parse({"--config", missing}, "{}"));
}

TEST(CommandLine, BadConfigFileNamesTheFileAndTheKey) {
  test::TempDir dir;
  std::string path = dir.write("bad.json", R"({"children": [{"name": "a", "argv": ["x"], "bogus": 1}]})");
  EXPECT_EQ(error_of({"--config", path}), "config (" + path + "): children[0].bogus: unknown key");
  std::string broken = dir.write("broken.json", "{\"state_dir\": ");
  EXPECT_THAT(error_of({"--config", broken}), StartsWith("config (" + broken + "): config: not valid JSON at byte"));
  // Flags must not hide the file's syntax error.
  EXPECT_THAT(error_of({"--config", broken, "--state-dir", "/x"}), HasSubstr("not valid JSON at byte"));
  std::string array = dir.write("array.json", "[]");
  EXPECT_THAT(error_of({"--config", array, "--state-dir", "/x"}), HasSubstr("config: expected an object, got []"));
}

TEST(CommandLine, GpuboxConfigIsUsedWithoutConfigFlag) {
  auto line = parse({}, R"({"state_dir": "/from/env", "shutdown": {"grace_seconds": 3}})");
  ASSERT_TRUE(line) << line.status().to_string();
  EXPECT_EQ(line->config.state_dir, "/from/env");
  EXPECT_EQ(line->config.shutdown_grace, 3s);

  // Base64 of {"state_dir":"/b64"}
  auto encoded = parse({}, "eyJzdGF0ZV9kaXIiOiIvYjY0In0=");
  ASSERT_TRUE(encoded) << encoded.status().to_string();
  EXPECT_EQ(encoded->config.state_dir, "/b64");

  // Flags still override it.
  auto overridden = parse({"--state-dir", "/flag"}, R"({"state_dir": "/from/env", "env": {"E": "1"}})");
  ASSERT_TRUE(overridden);
  EXPECT_EQ(overridden->config.state_dir, "/flag");
  EXPECT_EQ(overridden->config.env.at("E"), "1");

  // An empty GPUBOX_CONFIG is as good as none.
  auto empty = parse({}, "");
  ASSERT_TRUE(empty);
  EXPECT_EQ(empty->config.state_dir, "/run/gpubox");
}

TEST(CommandLine, ConfigFileWinsOverGpuboxConfig) {
  test::TempDir dir;
  std::string path = dir.write("c.json", R"({"state_dir": "/from/file"})");
  auto line = parse({"--config", path}, R"({"state_dir": "/from/env"})");
  ASSERT_TRUE(line);
  EXPECT_EQ(line->config.state_dir, "/from/file");
  // ...even when GPUBOX_CONFIG is garbage.
  auto garbage_env = parse({"--config", path}, "%%%");
  ASSERT_TRUE(garbage_env) << garbage_env.status().to_string();
  EXPECT_EQ(garbage_env->config.state_dir, "/from/file");
}

TEST(CommandLine, BadGpuboxConfigNamesIt) {
  EXPECT_THAT(error_of({}, "%%%"), HasSubstr("GPUBOX_CONFIG"));
  EXPECT_EQ(error_of({}, R"({"bogus": true})"), "config (GPUBOX_CONFIG): bogus: unknown key");
}

TEST(CommandLine, ReadyFd) {
  auto line = parse({"--ready-fd", "3"});
  ASSERT_TRUE(line);
  EXPECT_EQ(line->ready_fd, 3);
  auto zero = parse({"--ready-fd", "0"});
  ASSERT_TRUE(zero);
  EXPECT_EQ(zero->ready_fd, 0);
  for (const char* bad : {"-1", "abc", "3.5", "65536", "", "3x", "nan", "inf", "1e10"}) {
    auto refused = parse({"--ready-fd", bad});
    ASSERT_FALSE(refused) << "--ready-fd '" << bad << "' was accepted as " << refused->ready_fd;
    EXPECT_EQ(refused.status().message(), std::string("--ready-fd: expected a file descriptor number, got \"") + bad + "\"");
  }
}

// The document is read from the descriptor to its end, and the descriptor is
// closed, so that no child inherits the secrets it held.
TEST(CommandLine, ConfigFdIsReadToItsEndAndClosed) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  std::string document = R"({"state_dir": "/from/fd", "secrets": {"TOKEN": "s3cret"}})";
  ASSERT_EQ(::write(fds[1], document.data(), document.size()), static_cast<ssize_t>(document.size()));
  ::close(fds[1]);
  auto line = parse({"--config-fd", std::to_string(fds[0])}, R"({"state_dir": "/from/env"})");
  ASSERT_TRUE(line) << line.status().to_string();
  EXPECT_EQ(line->config.state_dir, "/from/fd");
  EXPECT_EQ(line->config.secrets.at("TOKEN"), "s3cret");
  EXPECT_EQ(::fcntl(fds[0], F_GETFD), -1) << "the config fd is still open";
}

TEST(CommandLine, ConfigFdErrors) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  ASSERT_EQ(::write(fds[1], "{\"bogus\": 1}", 12), 12);
  ::close(fds[1]);
  EXPECT_EQ(error_of({"--config-fd", std::to_string(fds[0])}), "config (--config-fd): bogus: unknown key");
  EXPECT_EQ(error_of({"--config-fd", "x"}), "--config-fd: expected a file descriptor number, got \"x\"");
  EXPECT_THAT(error_of({"--config-fd", "999"}), HasSubstr("cannot read --config-fd 999"));
  EXPECT_EQ(error_of({"--config", "/c.json", "--config-fd", "5"}), "--config and --config-fd: give one of them");
}

TEST(CommandLine, CheckConfigMode) {
  auto line = parse({"--check-config", "--state-dir", "/checked"});
  ASSERT_TRUE(line) << line.status().to_string();
  EXPECT_EQ(line->mode, CommandLine::Mode::check_config);
  EXPECT_EQ(line->config.state_dir, "/checked");
  // A bad config is still an error: that is what checking it is for.
  EXPECT_THAT(error_of({"--check-config"}, R"({"shutdown": {"grace_seconds": -1}})"),
              HasSubstr("shutdown.grace_seconds: expected a number from 0 to 3600, got -1"));
}

}  // namespace
}  // namespace gpubox
