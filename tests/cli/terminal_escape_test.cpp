// What sandbox code (or an answer it can shape) puts in the CLI's human output
// never acts on the terminal: a job's command and a file it wrote, a model
// host's names and errors, a sandbox record's name and how it ended all come
// out through escape_for_terminal (base/terminal_text.h), so an OSC title
// (ESC ] 0 ; … BEL), a clear screen (ESC [ 2 J) or a right-to-left override
// (U+202E) shows as \x1b, \x07 and \u202e. --json keeps the text itself,
// with the C0 controls JSON-escaped. The real CLI against a real local
// sandbox, and against an in-process model host on an ipc socket.
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gmock/gmock.h>

#include "rpc/server.h"
#include "tests/cli/cli_fixture.h"

namespace gpubox::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// Retitles the window, clears the screen, then reverses what follows.
const std::string kHostile = "\x1b]0;pwned\x07\x1b[2J\xe2\x80\xae";
// How the terminal shows it instead.
const std::string kShown = "\\x1b]0;pwned\\x07\\x1b[2J\\u202e";
// The file name the job writes: the controls without U+202E.
const std::string kNameShown = "\\x1b]0;pwned\\x07\\x1b[2J";

// No byte of text acts on a terminal: no ESC, no BEL, no U+202E.
void expect_inert(const std::string& text, const std::string& what) {
  EXPECT_EQ(text.find('\x1b'), std::string::npos) << what << " holds a raw ESC: " << text;
  EXPECT_EQ(text.find('\x07'), std::string::npos) << what << " holds a raw BEL: " << text;
  EXPECT_EQ(text.find("\xe2\x80\xae"), std::string::npos) << what << " holds a raw U+202E: " << text;
}

TEST_F(CliTest, JobsWaitAndResultShowWhatTheJobNamedEscaped) {
  std::string id = create();
  // The command holds the hostile text, and writes a file named with its controls (printf makes the bytes in the
  // sandbox; U+202E stays out of the name: the agent's stager, in the C locale, cannot yet archive a name that is
  // not ASCII).
  std::string command = ": '" + kHostile + "'; mkdir -p out; touch \"out/$(printf 'f\\033]0;pwned\\007\\033[2J')\"";
  CliRun submitted = run({"submit", id, "--", command});
  ASSERT_EQ(submitted.status, 0) << submitted.err;
  std::string job = submitted.out.substr(0, submitted.out.find('\n'));

  CliRun waited = run({"wait", id, job});
  EXPECT_EQ(waited.status, 0) << waited.out << waited.err;
  expect_inert(waited.out, "wait");
  EXPECT_THAT(waited.out, HasSubstr("out/f" + kNameShown)) << "the featured file, escaped";

  CliRun jobs = run({"jobs", id});
  EXPECT_EQ(jobs.status, 0) << jobs.err;
  expect_inert(jobs.out, "jobs");
  EXPECT_THAT(jobs.out, HasSubstr(": '" + kShown + "'")) << "the command, escaped";

  CliRun listed = run({"jobs", id, "--json"});
  EXPECT_EQ(listed.status, 0) << listed.err;
  EXPECT_EQ(listed.out.find('\x1b'), std::string::npos) << "JSON escapes C0 controls: " << listed.out;
  nlohmann::json parsed = nlohmann::json::parse(listed.out, nullptr, false);
  ASSERT_TRUE(parsed.is_array() && parsed.size() == 1) << listed.out;
  EXPECT_EQ(parsed[0]["command"], command) << "--json keeps the command itself";

  std::string out = scratch() + "/harvest";
  CliRun result = run({"result", id, job, "--out", out});
  ASSERT_EQ(result.status, 0) << result.err;
  expect_inert(result.out, "result");
  EXPECT_THAT(result.out, HasSubstr(out + "/out/f" + kNameShown));
  EXPECT_TRUE(std::filesystem::exists(out + "/out/f\x1b]0;pwned\x07\x1b[2J")) << "the file itself keeps its name";
}

TEST_F(CliTest, LsAndInfoShowASandboxRecordsNameEscaped) {
  std::string id = create({"--name", "plain"});
  // A record read back from the store (edited, or written by an older gpubox) is shown, not obeyed.
  nlohmann::json edited = record(id);
  ASSERT_TRUE(edited.is_object());
  edited["name"] = "n" + kHostile;
  write_text(store_dir() + "/" + id + "/sandbox.json", edited.dump());

  CliRun listed = run({"ls"});
  EXPECT_EQ(listed.status, 0) << listed.err;
  expect_inert(listed.out, "ls");
  EXPECT_THAT(listed.out, HasSubstr("n" + kShown));

  CliRun info = run({"info", id});
  expect_inert(info.out, "info");
  EXPECT_THAT(info.out, HasSubstr("name:        n" + kShown));
}

// A model host on an ipc socket that answers model.list, model.info and model.hooks with what a
// sandbox's files could make them say (its config names the architecture; a failed load says why).
class HostileModelHost {
 public:
  explicit HostileModelHost(const std::string& path) {
    methods_.add("sys.info", [](rpc::CallContext&) -> Result<nlohmann::json> { return nlohmann::json::object(); });
    methods_.add("model.list", [](rpc::CallContext&) -> Result<nlohmann::json> {
      return nlohmann::json{{"models",
                             {{{"name", "m" + kHostile}, {"state", "failed"}, {"architecture", "arch" + kHostile},
                               {"error", "config.json says " + kHostile}},
                              {{"name", "r"}, {"state", "ready"}}}}};
    });
    methods_.add("model.info", [](rpc::CallContext&) -> Result<nlohmann::json> {
      return nlohmann::json{{"architecture", "arch" + kHostile}, {"path", "/models/p" + kHostile}};
    });
    methods_.add("model.hooks", [](rpc::CallContext&) -> Result<nlohmann::json> {
      return nlohmann::json{{"hooks", {{{"name", "h" + kHostile}, {"shape", {"batch", "d" + kHostile}}}}}};
    });
    rpc::ServerOptions options;
    options.endpoints = {"ipc://" + path};
    auto started = rpc::Server::start(std::move(options), methods_);
    EXPECT_TRUE(started) << started.status().to_string();
    if (started) server_ = std::move(*started);
  }

 private:
  rpc::MethodRegistry methods_;  // the server reads it while it runs
  std::unique_ptr<rpc::Server> server_;
};

TEST_F(CliTest, ModelLsInfoAndHooksShowWhatTheModelHostSaidEscaped) {
  std::string socket = scratch() + "/modeld.sock";
  HostileModelHost host(socket);
  std::string endpoint = "ipc://" + socket;

  CliRun listed = run({"model", endpoint, "ls"});
  EXPECT_EQ(listed.status, 0) << listed.err;
  expect_inert(listed.out, "model ls");
  EXPECT_THAT(listed.out, HasSubstr("m" + kShown));
  EXPECT_THAT(listed.out, HasSubstr("arch" + kShown));
  EXPECT_THAT(listed.out, HasSubstr("config.json says " + kShown));

  CliRun as_json = run({"model", endpoint, "ls", "--json"});
  EXPECT_EQ(as_json.status, 0) << as_json.err;
  EXPECT_EQ(as_json.out.find('\x1b'), std::string::npos) << as_json.out;
  nlohmann::json parsed = nlohmann::json::parse(as_json.out, nullptr, false);
  ASSERT_TRUE(parsed.is_array() && parsed.size() == 2) << as_json.out;
  EXPECT_EQ(parsed[0]["name"], "m" + kHostile) << "--json keeps the name itself";

  // info and hooks wait for the model first: a failed one is an error (escaped by the CLI's error reporting).
  CliRun info = run({"model", endpoint, "info", "m" + kHostile});
  EXPECT_NE(info.status, 0);
  expect_inert(info.out + info.err, "model info of a failed model");
  EXPECT_THAT(info.err, HasSubstr("config.json says " + kShown));

  CliRun ready = run({"model", endpoint, "info", "r"});
  EXPECT_EQ(ready.status, 0) << ready.err;
  expect_inert(ready.out, "model info");
  EXPECT_THAT(ready.out, HasSubstr("arch" + kShown));
  EXPECT_THAT(ready.out, HasSubstr("/models/p" + kShown));

  CliRun hooks = run({"model", endpoint, "hooks", "r"});
  EXPECT_EQ(hooks.status, 0) << hooks.err;
  expect_inert(hooks.out, "model hooks");
  EXPECT_THAT(hooks.out, HasSubstr("h" + kShown));
  EXPECT_THAT(hooks.out, HasSubstr("[batch, d" + kShown + "]"));
}

}  // namespace
}  // namespace gpubox::testing
