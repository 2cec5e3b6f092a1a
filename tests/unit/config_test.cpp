// agent/config.h: the config document is parsed strictly; every error names
// the key path and what was expected.
#include "agent/config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>

#include "base/base64.h"

namespace gpubox {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;
using ::testing::StartsWith;

// The message of a config that must be refused, with invalid_request.
std::string error_of(std::string_view json_text) {
  auto config = parse_config(json_text);
  if (config.is_ok()) {
    ADD_FAILURE() << "accepted: " << json_text;
    return {};
  }
  EXPECT_EQ(config.status().code(), ErrorCode::invalid_request) << json_text;
  return config.status().message();
}

// A document with one child whose other keys are `extra` (a JSON fragment).
std::string child_doc(const std::string& extra) {
  return R"({"children": [{"name": "c", "argv": ["/bin/true"])" + (extra.empty() ? "" : ", " + extra) + "}]}";
}


TEST(ParseConfig, EmptyObjectGivesTheDefaults) {
  auto config = parse_config("{}");
  ASSERT_TRUE(config) << config.status().to_string();
  EXPECT_EQ(config->state_dir, "/run/gpubox");
  EXPECT_EQ(config->log_level, log::Level::info);
  EXPECT_TRUE(config->log_stderr);
  EXPECT_TRUE(config->log_file);
  EXPECT_EQ(config->shutdown_grace, 10s);
  EXPECT_TRUE(config->env.empty());
  EXPECT_TRUE(config->secrets.empty());
  EXPECT_TRUE(config->children.empty());
}

TEST(ParseConfig, ChildDefaults) {
  auto config = parse_config(child_doc(""));
  ASSERT_TRUE(config) << config.status().to_string();
  ASSERT_EQ(config->children.size(), 1u);
  const ChildSpec& child = config->children[0];
  EXPECT_EQ(child.name, "c");
  EXPECT_EQ(child.argv, std::vector<std::string>{"/bin/true"});
  EXPECT_TRUE(child.env.empty());
  EXPECT_EQ(child.cwd, "");
  EXPECT_EQ(child.restart, RestartPolicy::on_failure);
  EXPECT_EQ(child.backoff_initial, 100ms);
  EXPECT_EQ(child.backoff_max, 30s);
  EXPECT_EQ(child.max_restarts, 5);
  EXPECT_EQ(child.restart_window, 60s);
}

TEST(ParseConfig, EveryFieldIsParsed) {
  auto config = parse_config(R"({
    "state_dir": "/var/lib/gpubox",
    "log": {"level": "debug", "stderr": false, "file": false},
    "shutdown": {"grace_seconds": 2.5},
    "env": {"A": "1", "_B2": "two words"},
    "secrets": {"TOKEN": "s3cr3t"},
    "children": [
      {"name": "kernel", "argv": ["python3", "-m", "x"], "env": {"K": "v"}, "cwd": "/work",
       "restart": "always", "backoff_initial_ms": 250, "backoff_max_ms": 4000,
       "max_restarts": 7, "restart_window_seconds": 120},
      {"name": "modeld-2", "argv": ["/usr/bin/gpubox-modeld"], "restart": "never"}
    ]
  })");
  ASSERT_TRUE(config) << config.status().to_string();
  EXPECT_EQ(config->state_dir, "/var/lib/gpubox");
  EXPECT_EQ(config->log_level, log::Level::debug);
  EXPECT_FALSE(config->log_stderr);
  EXPECT_FALSE(config->log_file);
  EXPECT_EQ(config->shutdown_grace, 2500ms);
  EXPECT_EQ(config->env, (std::map<std::string, std::string>{{"A", "1"}, {"_B2", "two words"}}));
  EXPECT_EQ(config->secrets, (std::map<std::string, std::string>{{"TOKEN", "s3cr3t"}}));
  ASSERT_EQ(config->children.size(), 2u);
  const ChildSpec& kernel = config->children[0];
  EXPECT_EQ(kernel.name, "kernel");
  EXPECT_EQ(kernel.argv, (std::vector<std::string>{"python3", "-m", "x"}));
  EXPECT_EQ(kernel.env, (std::map<std::string, std::string>{{"K", "v"}}));
  EXPECT_EQ(kernel.cwd, "/work");
  EXPECT_EQ(kernel.restart, RestartPolicy::always);
  EXPECT_EQ(kernel.backoff_initial, 250ms);
  EXPECT_EQ(kernel.backoff_max, 4s);
  EXPECT_EQ(kernel.max_restarts, 7);
  EXPECT_EQ(kernel.restart_window, 120s);
  EXPECT_EQ(config->children[1].name, "modeld-2");
  EXPECT_EQ(config->children[1].restart, RestartPolicy::never);
}

TEST(ParseConfig, EveryLogLevelIsAccepted) {
  const std::pair<const char*, log::Level> levels[] = {
      {"trace", log::Level::trace}, {"debug", log::Level::debug}, {"info", log::Level::info},
      {"warn", log::Level::warn},   {"error", log::Level::error}, {"off", log::Level::off}};
  for (const auto& [name, level] : levels) {
    auto config = parse_config(std::string(R"({"log": {"level": ")") + name + "\"}}");
    ASSERT_TRUE(config) << name << ": " << config.status().to_string();
    EXPECT_EQ(config->log_level, level) << name;
  }
  EXPECT_THAT(error_of(R"({"log": {"level": "verbose"}})"), StartsWith("log.level: expected one of"));
  EXPECT_THAT(error_of(R"({"log": {"level": "INFO"}})"), HasSubstr("got \"INFO\""));
}

TEST(ParseConfig, RestartPolicies) {
  const std::pair<const char*, RestartPolicy> policies[] = {
      {"always", RestartPolicy::always}, {"on-failure", RestartPolicy::on_failure}, {"never", RestartPolicy::never}};
  for (const auto& [name, policy] : policies) {
    auto config = parse_config(child_doc(std::string(R"("restart": ")") + name + "\""));
    ASSERT_TRUE(config) << name << ": " << config.status().to_string();
    EXPECT_EQ(config->children[0].restart, policy);
    EXPECT_EQ(restart_policy_name(policy), name);
  }
  EXPECT_EQ(error_of(child_doc(R"("restart": "sometimes")")),
            R"(children[0].restart: expected "always", "on-failure" or "never", got "sometimes")");
  EXPECT_THAT(error_of(child_doc(R"("restart": "on_failure")")), StartsWith("children[0].restart: expected"));
  EXPECT_THAT(error_of(child_doc(R"("restart": true)")), StartsWith("children[0].restart: expected a string"));
}

TEST(ParseConfig, UnknownTopLevelKeyIsRefused) {
  EXPECT_EQ(error_of(R"({"bogus": 1})"), "bogus: unknown key");
  EXPECT_EQ(error_of(R"({"state_dir": "/x", "statedir": "/y"})"), "statedir: unknown key");
}

TEST(ParseConfig, UnknownNestedKeyNamesItsPath) {
  EXPECT_EQ(error_of(child_doc(R"("bogus": 1)")), "children[0].bogus: unknown key");
  EXPECT_EQ(error_of(R"({"children": [{"name": "a", "argv": ["x"]}, {"name": "b", "argv": ["y"], "Restart": "never"}]})"),
            "children[1].Restart: unknown key");
  EXPECT_EQ(error_of(R"({"log": {"levle": "info"}})"), "log.levle: unknown key");
  EXPECT_EQ(error_of(R"({"shutdown": {"grace": 3}})"), "shutdown.grace: unknown key");
}

TEST(ParseConfig, WrongTypesNameTheKeyAndTheValue) {
  EXPECT_EQ(error_of("[]"), "config: expected an object, got []");
  EXPECT_EQ(error_of("42"), "config: expected an object, got 42");
  EXPECT_EQ(error_of(R"({"state_dir": 5})"), "state_dir: expected a string, got 5");
  EXPECT_EQ(error_of(R"({"log": "debug"})"), R"(log: expected an object, got "debug")");
  EXPECT_EQ(error_of(R"({"log": {"stderr": "yes"}})"), R"(log.stderr: expected true or false, got "yes")");
  EXPECT_EQ(error_of(R"({"log": {"file": 1}})"), "log.file: expected true or false, got 1");
  EXPECT_EQ(error_of(R"({"shutdown": {"grace_seconds": "5"}})"),
            R"(shutdown.grace_seconds: expected a number from 0 to 3600, got "5")");
  EXPECT_EQ(error_of(R"({"env": ["A=1"]})"), R"(env: expected an object of strings, got ["A=1"])");
  EXPECT_EQ(error_of(R"({"env": {"A": 1}})"), "env.A: expected a string, got 1");
  EXPECT_EQ(error_of(R"({"secrets": {"T": null}})"), "secrets.T: expected a string, got null");
  EXPECT_EQ(error_of(R"({"children": {}})"), "children: expected an array of child objects, got {}");
  EXPECT_EQ(error_of(R"({"children": ["a"]})"), R"(children[0]: expected an object, got "a")");
  EXPECT_EQ(error_of(R"({"children": [{"name": 3, "argv": ["x"]}]})"), "children[0].name: expected a string, got 3");
  EXPECT_EQ(error_of(R"({"children": [{"name": "c", "argv": "/bin/true"}]})"),
            R"(children[0].argv: expected a non-empty array of strings, got "/bin/true")");
  EXPECT_EQ(error_of(R"({"children": [{"name": "c", "argv": ["x", 2]}]})"), "children[0].argv[1]: expected a string, got 2");
  EXPECT_EQ(error_of(child_doc(R"("max_restarts": 1.5)")),
            "children[0].max_restarts: expected an integer from 0 to 1000000, got 1.5");
  EXPECT_EQ(error_of(child_doc(R"("max_restarts": "3")")),
            R"(children[0].max_restarts: expected an integer from 0 to 1000000, got "3")");
  EXPECT_EQ(error_of(child_doc(R"("cwd": false)")), "children[0].cwd: expected a string, got false");
  EXPECT_EQ(error_of(child_doc(R"("env": {"K": {}})")), "children[0].env.K: expected a string, got {}");
}

TEST(ParseConfig, GraceSecondsRange) {
  auto at = [](const std::string& value) { return parse_config(R"({"shutdown": {"grace_seconds": )" + value + "}}"); };
  EXPECT_EQ(error_of(R"({"shutdown": {"grace_seconds": 3601}})"),
            "shutdown.grace_seconds: expected a number from 0 to 3600, got 3601");
  EXPECT_EQ(error_of(R"({"shutdown": {"grace_seconds": -1}})"),
            "shutdown.grace_seconds: expected a number from 0 to 3600, got -1");
  EXPECT_THAT(error_of(R"({"shutdown": {"grace_seconds": 3600.001}})"), StartsWith("shutdown.grace_seconds: expected"));
  EXPECT_THAT(error_of(R"({"shutdown": {"grace_seconds": 1e300}})"), StartsWith("shutdown.grace_seconds: expected"));
  ASSERT_TRUE(at("0"));
  EXPECT_EQ(at("0")->shutdown_grace, 0ms);
  ASSERT_TRUE(at("3600"));
  EXPECT_EQ(at("3600")->shutdown_grace, 3600s);
  ASSERT_TRUE(at("0.25"));
  EXPECT_EQ(at("0.25")->shutdown_grace, 250ms);
}

TEST(ParseConfig, FractionalSecondsBecomeTheNearestMillisecond) {
  // 1.001 * 1000 is 1000.9999999999999 in binary floating point.
  for (int ms : {1, 7, 290, 1001, 1003, 1005, 2003, 4350, 3599999}) {
    char text[32];
    std::snprintf(text, sizeof text, "%d.%03d", ms / 1000, ms % 1000);
    auto config = parse_config(std::string(R"({"shutdown": {"grace_seconds": )") + text + "}}");
    ASSERT_TRUE(config) << text;
    EXPECT_EQ(config->shutdown_grace.count(), ms) << "grace_seconds " << text;
    auto child = parse_config(child_doc(std::string(R"("restart_window_seconds": )") + text));
    if (ms >= 1000) {
      ASSERT_TRUE(child) << text << ": " << child.status().to_string();
      EXPECT_EQ(child->children[0].restart_window.count(), ms) << "restart_window_seconds " << text;
    }
  }
}

TEST(ParseConfig, ChildNumberRanges) {
  EXPECT_EQ(error_of(child_doc(R"("backoff_initial_ms": 0)")),
            "children[0].backoff_initial_ms: expected a number from 1 to 600000, got 0");
  EXPECT_EQ(error_of(child_doc(R"("backoff_max_ms": 3600001)")),
            "children[0].backoff_max_ms: expected a number from 1 to 3600000, got 3600001");
  EXPECT_EQ(error_of(child_doc(R"("backoff_initial_ms": 500, "backoff_max_ms": 400)")),
            "children[0].backoff_max_ms: expected a number no smaller than backoff_initial_ms, got 400");
  EXPECT_EQ(error_of(child_doc(R"("max_restarts": -1)")),
            "children[0].max_restarts: expected an integer from 0 to 1000000, got -1");
  EXPECT_EQ(error_of(child_doc(R"("max_restarts": 1000001)")),
            "children[0].max_restarts: expected an integer from 0 to 1000000, got 1000001");
  // Above INT64_MAX: must not wrap around into the range.
  EXPECT_THAT(error_of(child_doc(R"("max_restarts": 18446744073709551615)")),
              StartsWith("children[0].max_restarts: expected an integer"));
  EXPECT_EQ(error_of(child_doc(R"("restart_window_seconds": 0.5)")),
            "children[0].restart_window_seconds: expected a number from 1 to 86400, got 0.5");
  auto zero = parse_config(child_doc(R"("max_restarts": 0)"));
  ASSERT_TRUE(zero);
  EXPECT_EQ(zero->children[0].max_restarts, 0);
}

TEST(ParseConfig, DuplicateChildNamesAreRefused) {
  EXPECT_EQ(error_of(R"({"children": [{"name": "a", "argv": ["x"]}, {"name": "b", "argv": ["x"]},
                                      {"name": "a", "argv": ["y"]}]})"),
            R"(children[2].name: expected a name no other child has, got "a")");
}

TEST(ParseConfig, ChildNames) {
  EXPECT_THAT(error_of(R"({"children": [{"argv": ["x"]}]})"), StartsWith("children[0].name: expected 1 to 64 of"));
  EXPECT_THAT(error_of(R"({"children": [{"name": "Kernel", "argv": ["x"]}]})"), HasSubstr("got \"Kernel\""));
  EXPECT_THAT(error_of(R"({"children": [{"name": "-a", "argv": ["x"]}]})"), StartsWith("children[0].name:"));
  EXPECT_THAT(error_of(R"({"children": [{"name": "a b", "argv": ["x"]}]})"), StartsWith("children[0].name:"));
  std::string longest(64, 'a');
  EXPECT_TRUE(parse_config(R"({"children": [{"name": ")" + longest + R"(", "argv": ["x"]}]})"));
  EXPECT_THAT(error_of(R"({"children": [{"name": ")" + longest + R"(a", "argv": ["x"]}]})"),
              StartsWith("children[0].name:"));
}

TEST(ParseConfig, ArgvMustBeNonEmpty) {
  EXPECT_EQ(error_of(R"({"children": [{"name": "c", "argv": []}]})"),
            "children[0].argv: expected a non-empty array of strings, got []");
  EXPECT_EQ(error_of(R"({"children": [{"name": "c"}]})"),
            "children[0].argv: expected a non-empty array of strings, got null");
  EXPECT_EQ(error_of(R"({"children": [{"name": "c", "argv": [""]}]})"),
            R"(children[0].argv[0]: expected a program name or path, got "")");
  EXPECT_THAT(error_of(R"({"children": [{"name": "c", "argv": ["x", "a\u0000b"]}]})"),
              StartsWith("children[0].argv[1]: expected a string without NUL bytes"));
}

TEST(ParseConfig, PathsMustBeAbsolute) {
  EXPECT_EQ(error_of(R"({"state_dir": "run/gpubox"})"), R"(state_dir: expected an absolute path, got "run/gpubox")");
  EXPECT_EQ(error_of(R"({"state_dir": ""})"), R"(state_dir: expected an absolute path, got "")");
  EXPECT_EQ(error_of(child_doc(R"("cwd": "work")")), R"(children[0].cwd: expected an absolute path, got "work")");
  EXPECT_EQ(error_of(child_doc(R"("cwd": "./work")")), R"(children[0].cwd: expected an absolute path, got "./work")");
}

TEST(ParseConfig, LifecycleDefaultsAndFields) {
  auto defaults = parse_config("{}");
  ASSERT_TRUE(defaults.is_ok());
  EXPECT_EQ(defaults->lifecycle.timeout, 0ms);
  EXPECT_EQ(defaults->lifecycle.harvest_margin, 60s);
  auto config = parse_config(R"({"lifecycle": {"timeout_seconds": 3600, "idle_timeout_seconds": 0.5,
      "harvest_margin_seconds": 90, "lease_seconds": 30, "persistent_dir": "/vol/out"}})");
  ASSERT_TRUE(config.is_ok()) << config.status().to_string();
  EXPECT_EQ(config->lifecycle.timeout, 3600s);
  EXPECT_EQ(config->lifecycle.idle_timeout, 500ms);
  EXPECT_EQ(config->lifecycle.harvest_margin, 90s);
  EXPECT_EQ(config->lifecycle.lease, 30s);
  EXPECT_EQ(config->lifecycle.persistent_dir, "/vol/out");
  EXPECT_EQ(error_of(R"({"lifecycle": {"timeout_seconds": -1}})"),
            "lifecycle.timeout_seconds: expected a number from 0 to 604800, got -1");
  EXPECT_EQ(error_of(R"({"lifecycle": {"persistent_dir": "vol"}})"),
            R"(lifecycle.persistent_dir: expected an absolute path, got "vol")");
  EXPECT_EQ(error_of(R"({"lifecycle": {"deadline": 1}})"), "lifecycle.deadline: unknown key");
}

TEST(ParseConfig, EnvironmentNamesAreChecked) {
  EXPECT_EQ(error_of(R"({"env": {"1A": "x"}})"), "env.1A: expected an environment variable name ([A-Za-z_][A-Za-z0-9_]*)");
  EXPECT_THAT(error_of(R"({"env": {"A=B": "x"}})"), StartsWith("env.A=B: expected an environment variable name"));
  EXPECT_THAT(error_of(R"({"env": {"": "x"}})"), StartsWith("env.: expected an environment variable name"));
  EXPECT_THAT(error_of(R"({"env": {"A-B": "x"}})"), StartsWith("env.A-B: expected"));
  EXPECT_THAT(error_of(R"({"env": {"\u00e9": "x"}})"), StartsWith("env."));
  EXPECT_THAT(error_of(R"({"secrets": {"bad name": "x"}})"), StartsWith("secrets.bad name: expected an environment variable name"));
  EXPECT_THAT(error_of(child_doc(R"("env": {"X.Y": "1"})")), StartsWith("children[0].env.X.Y: expected an environment variable name"));
  EXPECT_EQ(error_of(R"({"env": {"A": "x\u0000y"}})"), "env.A: value holds a NUL byte");
}

TEST(ParseConfig, HugeOrDeepValuesGiveAnErrorNotACrash) {
  // A bad config must end in one error line, never in a crashed PID 1.
  std::string long_name(200'000, 'A');
  EXPECT_TRUE(parse_config(R"({"env": {")" + long_name + R"(": "x"}})"));
  EXPECT_THAT(error_of(R"({"env": {")" + long_name + R"(-": "x"}})"), StartsWith("env.AAAA"));

  std::string deep = std::string(100'000, '[') + std::string(100'000, ']');
  EXPECT_THAT(error_of(deep), StartsWith("config: expected an object, got ["));
  EXPECT_THAT(error_of(R"({"state_dir": )" + deep + "}"), StartsWith("state_dir: expected a string, got ["));
  EXPECT_THAT(error_of(R"({"children": [{"name": "c", "argv": [)" + deep + "]}]}"),
              StartsWith("children[0].argv[0]: expected a string"));
}

TEST(ParseConfig, LongValuesAreShortenedInMessages) {
  std::string message = error_of(R"({"state_dir": ")" + std::string(500, 'x') + "\"}");
  EXPECT_THAT(message, StartsWith("state_dir: expected an absolute path"));
  EXPECT_LT(message.size(), 200u);
  EXPECT_THAT(message, HasSubstr("..."));
}

TEST(ParseConfig, InvalidJsonNamesTheBytePosition) {
  EXPECT_THAT(error_of(R"({"state_dir": })"), StartsWith("config: not valid JSON at byte 15"));
  EXPECT_THAT(error_of(R"({"a": 1,})"), StartsWith("config: not valid JSON at byte 9"));
  EXPECT_THAT(error_of(""), StartsWith("config: not valid JSON at byte 1"));
  EXPECT_THAT(error_of("{} x"), StartsWith("config: not valid JSON at byte 4"));
  EXPECT_THAT(error_of("{\"env\": {\"A\": \"\xff\"}}"), StartsWith("config: not valid JSON at byte"));
}

TEST(DecodeConfigEnv, PlainJsonIsReturnedAsIs) {
  auto text = decode_config_env(R"({"state_dir": "/x"})");
  ASSERT_TRUE(text);
  EXPECT_EQ(*text, R"({"state_dir": "/x"})");
  auto spaced = decode_config_env("\n  {}");
  ASSERT_TRUE(spaced);
  EXPECT_EQ(*spaced, "\n  {}");
}

TEST(DecodeConfigEnv, Base64IsDecoded) {
  const std::string json_text = R"({"state_dir": "/from/base64", "env": {"A": "a+b/c="}})";
  auto text = decode_config_env(base64_encode(json_text));
  ASSERT_TRUE(text) << text.status().to_string();
  EXPECT_EQ(*text, json_text);
  auto config = parse_config(*text);
  ASSERT_TRUE(config);
  EXPECT_EQ(config->state_dir, "/from/base64");

  // Line-wrapped, as `base64` prints it.
  std::string wrapped = base64_encode(json_text);
  wrapped.insert(20, "\n");
  wrapped += "\n";
  auto unwrapped = decode_config_env(wrapped);
  ASSERT_TRUE(unwrapped);
  EXPECT_EQ(*unwrapped, json_text);

  // Every padding length.
  for (std::string doc : {"{}", "{} ", "{}  "}) {
    auto decoded = decode_config_env(base64_encode(doc));
    ASSERT_TRUE(decoded) << doc;
    EXPECT_EQ(*decoded, doc);
  }
}

TEST(DecodeConfigEnv, GarbageIsRefused) {
  for (const char* garbage : {"", "not json!", "[1, 2]", "%%%%", "e30=e30=", "   "}) {
    auto text = decode_config_env(garbage);
    EXPECT_FALSE(text) << "'" << garbage << "' gave '" << (text ? *text : "") << "'";
    if (!text) {
      EXPECT_EQ(text.status().code(), ErrorCode::invalid_request);
      EXPECT_THAT(text.status().message(), StartsWith("GPUBOX_CONFIG: expected a JSON object or its base64 encoding"));
    }
  }
}

TEST(ConfigToJson, RedactsSecretValues) {
  auto config = parse_config(R"({"env": {"PLAIN": "visible-value"},
                                "secrets": {"HF_TOKEN": "hf_s3cr3t", "API_KEY": "sk-abc123"}})");
  ASSERT_TRUE(config);
  std::string text = config_to_json(*config);
  EXPECT_EQ(text.find("hf_s3cr3t"), std::string::npos) << text;
  EXPECT_EQ(text.find("sk-abc123"), std::string::npos) << text;
  auto document = nlohmann::json::parse(text);
  EXPECT_EQ(document["secrets"], (nlohmann::json{{"HF_TOKEN", "[redacted]"}, {"API_KEY", "[redacted]"}}));
  EXPECT_EQ(document["env"]["PLAIN"], "visible-value");
}

TEST(ConfigToJson, RedactsTheRpcSecretKey) {
  const std::string key = "JTKVSB%%)wK0E.X)V>+}o?pNmC{O&4W4b!Ni{Lh6";  // a Z85 CURVE secret key
  auto config = parse_config(R"({"rpc": {"secret_key": ")" + key + R"("}})");
  ASSERT_TRUE(config) << config.status().to_string();
  EXPECT_EQ(config->rpc.secret_key, key);
  std::string text = config_to_json(*config);
  EXPECT_EQ(text.find(key), std::string::npos) << text;
  EXPECT_EQ(nlohmann::json::parse(text)["rpc"]["secret_key"], "[redacted]");
  // A malformed key is refused without being echoed.
  std::string bad = key.substr(0, 39) + "~";
  std::string message = error_of(R"({"rpc": {"secret_key": ")" + bad + R"("}})");
  EXPECT_THAT(message, StartsWith("rpc.secret_key: expected"));
  EXPECT_EQ(message.find(bad.substr(0, 10)), std::string::npos) << message;
}

TEST(ConfigToJson, RoundTripsThroughTheParser) {
  const char* source = R"({
    "state_dir": "/s", "log": {"level": "warn", "stderr": false, "file": true},
    "shutdown": {"grace_seconds": 1.5}, "env": {"E": "1"},
    "children": [{"name": "k", "argv": ["a", "b c"], "env": {"X": "y"}, "cwd": "/w", "restart": "always",
                  "backoff_initial_ms": 5, "backoff_max_ms": 50, "max_restarts": 9, "restart_window_seconds": 30}]})";
  auto config = parse_config(source);
  ASSERT_TRUE(config);
  std::string text = config_to_json(*config);
  auto again = parse_config(text);
  ASSERT_TRUE(again) << again.status().to_string() << "\n" << text;
  EXPECT_EQ(config_to_json(*again), text);
  EXPECT_EQ(again->state_dir, "/s");
  EXPECT_EQ(again->log_level, log::Level::warn);
  EXPECT_FALSE(again->log_stderr);
  EXPECT_EQ(again->shutdown_grace, 1500ms);
  ASSERT_EQ(again->children.size(), 1u);
  const ChildSpec& child = again->children[0];
  EXPECT_EQ(child.argv, (std::vector<std::string>{"a", "b c"}));
  EXPECT_EQ(child.cwd, "/w");
  EXPECT_EQ(child.restart, RestartPolicy::always);
  EXPECT_EQ(child.backoff_initial, 5ms);
  EXPECT_EQ(child.backoff_max, 50ms);
  EXPECT_EQ(child.max_restarts, 9);
  EXPECT_EQ(child.restart_window, 30s);
  // Defaults print every field, so the output documents the effective config.
  auto defaults = nlohmann::json::parse(config_to_json(Config{}));
  EXPECT_EQ(defaults["state_dir"], "/run/gpubox");
  EXPECT_EQ(defaults["log"]["level"], "info");
  EXPECT_EQ(defaults["shutdown"]["grace_seconds"], 10.0);
}

}  // namespace
}  // namespace gpubox
