// Bad configs and command lines are refused before anything starts: exit 2,
// exactly one line on stderr naming the key path or flag, no child started.
#include "tests/integration/integration_test.h"

namespace gpubox::testing {
namespace {

using BadConfig = IntegrationTest;

// A child that would leave a file behind if it ever ran (relative to the
// agent's cwd, the sandbox directory).
nlohmann::json witness_child() {
  return {{"name", "witness"}, {"argv", {"/bin/sh", "-c", ": > created"}}};
}

nlohmann::json with_witness(nlohmann::json document) {
  document["children"].push_back(witness_child());
  return document;
}

struct Case {
  std::string what;
  std::optional<nlohmann::json> config;  // passed with --config
  std::vector<std::string> flags;
  std::vector<std::string> env;
  std::vector<std::string> named;  // each must appear on the error line
};

std::vector<Case> cases() {
  const nlohmann::json valid = with_witness(nlohmann::json::object());
  const std::string valid_env = "GPUBOX_CONFIG=" + valid.dump();
  std::vector<Case> all;
  {
    auto doc = valid;
    doc["children"][0]["restrat"] = "always";
    all.push_back({"unknown key", doc, {}, {}, {"children[0].restrat", "unknown key"}});
  }
  {
    auto doc = valid;
    doc["shutdown"] = {{"grace_seconds", "ten"}};
    all.push_back({"wrong type", doc, {}, {}, {"shutdown.grace_seconds", "\"ten\""}});
  }
  {
    auto doc = valid;
    doc["children"][0]["max_restarts"] = -1;
    all.push_back({"out of range", doc, {}, {}, {"children[0].max_restarts", "-1"}});
  }
  {
    auto doc = valid;
    doc["children"][0]["backoff_initial_ms"] = 0;
    all.push_back({"out of range (milliseconds)", doc, {}, {}, {"children[0].backoff_initial_ms"}});
  }
  all.push_back({"unreadable file", std::nullopt, {"--config", "/nonexistent/gpubox-it/config.json"}, {valid_env},
                 {"/nonexistent/gpubox-it/config.json"}});
  all.push_back({"GPUBOX_CONFIG that is no JSON", std::nullopt, {}, {"GPUBOX_CONFIG=this is not json!"},
                 {"GPUBOX_CONFIG"}});
  {
    auto doc = valid;
    doc["bogus"] = true;
    all.push_back({"GPUBOX_CONFIG with an unknown key", std::nullopt, {}, {"GPUBOX_CONFIG=" + doc.dump()},
                   {"GPUBOX_CONFIG", "bogus"}});
  }
  {
    auto model = [](const std::string& name, const std::string& path) {
      return nlohmann::json{{"name", name}, {"path", path}};
    };
    auto doc = valid;
    doc["model_host"] = {{"models", {model("m", "/m")}}, {"binray", "/x"}};
    all.push_back({"model_host: unknown key", doc, {}, {}, {"model_host.binray", "unknown key"}});
    doc = valid;
    doc["model_host"] = {{"models", {model("m", "/m")}}};
    doc["model_host"]["models"][0]["dtype"] = "int8";
    all.push_back({"model_host: bad dtype", doc, {}, {}, {"model_host.models[0].dtype", "\"int8\""}});
    doc = valid;
    doc["model_host"] = {{"models", {model("m", "/a"), model("m", "/b")}}};
    all.push_back({"model_host: duplicate name", doc, {}, {}, {"model_host.models[1].name", "no other model"}});
    doc = valid;
    doc["model_host"] = {{"models", {model("m", "models/m")}}};
    all.push_back({"model_host: relative path", doc, {}, {}, {"model_host.models[0].path", "absolute"}});
  }
  all.push_back({"unknown flag", valid, {"--frobnicate"}, {}, {"--frobnicate"}});
  all.push_back({"flag without its value", valid, {"--grace-seconds"}, {}, {"--grace-seconds"}});
  all.push_back({"bad flag value", valid, {"--grace-seconds", "soon"}, {}, {"shutdown.grace_seconds", "soon"}});
  all.push_back({"bad log level", valid, {"--log-level", "loud"}, {}, {"log.level", "loud"}});
  all.push_back({"bad ready fd", valid, {"--ready-fd", "x"}, {}, {"--ready-fd"}});
  return all;
}

TEST_F(BadConfig, RefusedWithOneLineNamingTheKeyAndNothingStarted) {
  std::vector<Case> all = cases();
  std::vector<std::unique_ptr<AgentProcess>> boxes;
  for (const auto& c : all) {
    AgentOptions options;
    options.config = c.config;
    options.flags = c.flags;
    options.env = c.env;
    boxes.push_back(start(options));
    ASSERT_TRUE(boxes.back()) << c.what;
  }
  for (size_t i = 0; i < all.size(); ++i) {
    const Case& c = all[i];
    AgentProcess& box = *boxes[i];
    SCOPED_TRACE(c.what);
    EXPECT_EQ(box.wait_exit(kExitTimeout), 2);
    std::string err = box.stderr_text();
    EXPECT_EQ(count_lines(err), 1) << err;
    ASSERT_FALSE(err.empty());
    EXPECT_EQ(err.back(), '\n');
    EXPECT_EQ(err.rfind("gpubox-agent: ", 0), 0u) << err;
    for (const auto& name : c.named) EXPECT_NE(err.find(name), std::string::npos) << "not named: " << name << "\n" << err;
    EXPECT_FALSE(box.wait_ready(milliseconds(100)));
    EXPECT_FALSE(file_exists(box.path("created"))) << "a child ran despite the bad config";
    EXPECT_FALSE(file_exists(box.state_dir() + "/agent.log")) << "the agent got past validation";
  }
}

TEST_F(BadConfig, TheSameConfigWithoutTheFaultStartsTheChild) {
  // The control: the witness does leave its file when the config is valid.
  AgentOptions options;
  options.config = with_witness(nlohmann::json::object());
  auto box = start_ready(options);
  ASSERT_TRUE(box);
  EXPECT_TRUE(wait_until([&] { return file_exists(box->path("created")); }, kStartTimeout));
  ASSERT_TRUE(box->signal(SIGTERM));
  EXPECT_EQ(box->wait_exit(kExitTimeout), 0);
}

}  // namespace
}  // namespace gpubox::testing
