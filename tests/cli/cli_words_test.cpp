// Errors in the CLI's own words: what to type next rather than RPC method
// names, JSON errors with --json (same exit codes), wait's own exit code for
// a --timeout that ran out, put --parents, and gpubox rpc's stdin params and
// its message for a tcp:// endpoint without a key.
#include <filesystem>

#include <gmock/gmock.h>

#include "tests/cli/cli_fixture.h"

namespace gpubox::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// The {"error": {...}} object a --json run printed on stdout, or null.
nlohmann::json json_error(const CliRun& result) {
  nlohmann::json parsed = nlohmann::json::parse(result.out, nullptr, false);
  return parsed.is_object() && parsed.contains("error") ? parsed["error"] : nlohmann::json();
}

TEST_F(CliTest, PutToAMissingParentSaysToUseParentsAndParentsCreatesIt) {
  std::string id = create();
  write_text(scratch() + "/file.txt", "content");
  CliRun missing = run({"put", id, scratch() + "/file.txt", "deep/er/file.txt"});
  EXPECT_EQ(missing.status, 1);
  EXPECT_THAT(missing.err, HasSubstr("no directory '/workspace/deep/er'"));
  EXPECT_THAT(missing.err, HasSubstr("--parents"));
  EXPECT_EQ(run({"exec", id, "--", "ls", "-A", "/workspace"}).out, "") << "nothing was created";
  CliRun parents = run({"put", id, "--parents", scratch() + "/file.txt", "deep/er/file.txt"});
  EXPECT_EQ(parents.status, 0) << parents.err;
  EXPECT_EQ(run({"exec", id, "--", "cat", "/workspace/deep/er/file.txt"}).out, "content");
  std::filesystem::create_directories(scratch() + "/tree/sub");
  write_text(scratch() + "/tree/sub/x.txt", "x");
  CliRun tree = run({"put", id, "-p", scratch() + "/tree", "/workspace/a/b/tree"});
  EXPECT_EQ(tree.status, 0) << tree.err;
  EXPECT_EQ(run({"exec", id, "--", "cat", "/workspace/a/b/tree/sub/x.txt"}).out, "x");
}

TEST_F(CliTest, AgentMessagesNameTheCliCommandsNotRpcMethods) {
  std::string id = create({"--name", "wordy"});
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"wait", "wordy", "job-99"}, {"logs", "wordy", "job-99"}, {"cancel", "wordy", "job-99"}}) {
    CliRun result = run(args);
    EXPECT_EQ(result.status, 2) << args[0];
    EXPECT_THAT(result.err, HasSubstr("no job job-99 (`gpubox jobs wordy` lists them)")) << args[0];
    EXPECT_THAT(result.err, Not(HasSubstr("job.list"))) << args[0];
    EXPECT_THAT(result.err, Not(HasSubstr("params.job_id"))) << args[0];
  }
  CliRun unknown = run({"rpc", "wordy", "no.such_method"});
  EXPECT_EQ(unknown.status, 1);
  EXPECT_THAT(unknown.err, HasSubstr("`gpubox info wordy`"));
  EXPECT_THAT(unknown.err, Not(HasSubstr("sys.info")));
}

TEST_F(CliTest, JsonErrorsAreJsonOnStdoutWithTheSameExitCodes) {
  CliRun unknown_box = run({"--json", "exec", "nosuchbox", "--", "true"});
  EXPECT_EQ(unknown_box.status, 2);
  nlohmann::json error = json_error(unknown_box);
  ASSERT_TRUE(error.is_object()) << unknown_box.out << unknown_box.err;
  EXPECT_EQ(error["code"], "not_found");
  EXPECT_THAT(error["message"].get<std::string>(), HasSubstr("no sandbox with id or name 'nosuchbox'"));
  EXPECT_EQ(error["exit_code"], 2);
  EXPECT_EQ(unknown_box.err, "") << "nothing for people on stderr in --json mode";

  CliRun bad_flag = run({"create", "--bogus", "--json"});  // --json after the command counts too
  EXPECT_EQ(bad_flag.status, 2);
  EXPECT_EQ(json_error(bad_flag)["code"], "usage");
  EXPECT_TRUE(store_entries().empty());

  CliRun bad_command = run({"--json", "frobnicate"});
  EXPECT_EQ(bad_command.status, 2);
  EXPECT_EQ(json_error(bad_command)["code"], "usage");
  CliRun bad_value = run({"--json", "exec", "nosuchbox", "--timeout", "soon", "--", "true"});
  EXPECT_EQ(bad_value.status, 2);
  EXPECT_EQ(json_error(bad_value)["code"], "usage");

  std::string id = create();
  CliRun job = run({"--json", "wait", id, "job-7"});
  EXPECT_EQ(job.status, 2);
  EXPECT_EQ(json_error(job)["code"], "not_found");
  CliRun failed_call = run({"--json", "rpc", id, "fs.read", R"({"path": "/no/such/file"})"});
  EXPECT_EQ(failed_call.status, 1);
  EXPECT_EQ(json_error(failed_call)["code"], "not_found");

  pid_t agent = record(id)["agent_pid"].get<pid_t>();
  ASSERT_EQ(::kill(agent, SIGKILL), 0);
  for (int i = 0; i < 100 && ::kill(agent, 0) == 0; ++i) ::usleep(20'000);
  CliRun dead = run({"--json", "exec", id, "--", "true"});
  EXPECT_EQ(dead.status, 3);
  EXPECT_EQ(json_error(dead)["code"], "unavailable");
}

TEST_F(CliTest, WaitWhoseTimeoutRunsOutHasAnExitCodeOfItsOwn) {
  std::string id = create();
  CliRun submitted = run({"submit", id, "--", "sleep 30"});
  ASSERT_EQ(submitted.status, 0) << submitted.err;
  std::string job = submitted.out.substr(0, submitted.out.find('\n'));
  CliRun waited = run({"wait", id, job, "--timeout", "0.5"});
  EXPECT_EQ(waited.status, 124) << waited.out << waited.err;
  EXPECT_THAT(waited.out, HasSubstr("still running"));
  ASSERT_EQ(run({"cancel", id, job}).status, 0);
  CliRun cancelled = run({"wait", id, job, "--timeout", "20"});
  EXPECT_EQ(cancelled.status, 1) << "a job that did not succeed is still 1";
}

TEST_F(CliTest, RpcReadsParamsFromStdinAndATcpEndpointNeedsItsKey) {
  std::string id = create();
  std::string params = R"({"echo_me": [1, 2, 3]})";
  CliRun piped = run({"rpc", id, "sys.ping", "-"}, {}, nullptr, &params);
  ASSERT_EQ(piped.status, 0) << piped.err;
  EXPECT_EQ(nlohmann::json::parse(piped.out)["echo"]["echo_me"], nlohmann::json::array({1, 2, 3}));
  std::string garbage = "{not json";
  CliRun bad = run({"rpc", id, "sys.ping", "-"}, {}, nullptr, &garbage);
  EXPECT_EQ(bad.status, 2);
  EXPECT_THAT(bad.err, HasSubstr("expected a JSON object"));
  CliRun keyless = run({"rpc", "tcp://127.0.0.1:9", "sys.ping"});
  EXPECT_EQ(keyless.status, 2);
  EXPECT_THAT(keyless.err, HasSubstr("--server-key"));
}

}  // namespace
}  // namespace gpubox::testing
