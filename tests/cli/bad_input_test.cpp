// Bad input to the CLI: a clear message naming what is wrong, the documented
// exit code, and nothing half-created.
#include <filesystem>

#include <gmock/gmock.h>
#include <nlohmann/json.hpp>

#include "tests/cli/cli_fixture.h"

namespace gpubox::testing {
namespace {

using ::testing::HasSubstr;

TEST_F(CliTest, UnknownSandboxIsAUsageError) {
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"exec", "nosuchbox", "--", "true"}, {"info", "nosuchbox"}, {"put", "nosuchbox", "/etc/hostname", "/tmp/x"},
           {"get", "nosuchbox", "/x", "/tmp/x"}, {"logs", "nosuchbox"}, {"terminate", "nosuchbox"},
           {"rpc", "nosuchbox", "sys.ping"}}) {
    CliRun result = run(args);
    EXPECT_EQ(result.status, 2) << args[0];
    EXPECT_THAT(result.err, HasSubstr("no sandbox with id or name 'nosuchbox'")) << args[0];
  }
}

TEST_F(CliTest, BadFlagsNameTheFlag) {
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  for (const Case& c : std::vector<Case>{
           {{"create", "--bogus"}, "--bogus: unknown option"},
           {{"create", "--memory", "lots"}, "--memory: expected whole MiB"},
           {{"create", "--cpu", "0"}, "--cpu: expected a number of CPUs"},
           {{"create", "--network", "bridge"}, "--network: expected none or host"},
           {{"create", "--env", "1X=2"}, "--env: expected NAME=VALUE"},
           {{"create", "--name", "bad name"}, "--name 'bad name'"},
           {{"create", "--mount", "/etc"}, "--mount: expected LOCAL:SANDBOX"},
           {{"create", "--mount", "/no/such/dir:/data"}, "--mount: cannot use '/no/such/dir'"},
           {{"create", "--backend", "nomad"}, "--backend: 'nomad' is not available"},
           {{"create", "--backend", "kubernetes", "--namespace", "Bad"}, "'Bad' is not a Kubernetes namespace name"},
           {{"create", "--queue", "q"}, "--queue: only with --backend kubernetes"},
           {{"create", "--backend", "modal", "--gpu", "H100:99"}, "--gpu: expected a Modal GPU type"},
           {{"exec", "x"}, "expected a command"},
           {{"frobnicate"}, "unknown command 'frobnicate'"},
           {{"terminate"}, "expected sandbox ids or names, or --all"},
       }) {
    CliRun result = run(c.args);
    EXPECT_EQ(result.status, 2) << c.args[0] << " " << (c.args.size() > 1 ? c.args[1] : "");
    EXPECT_THAT(result.err, HasSubstr(c.message));
  }
  EXPECT_TRUE(store_entries().empty()) << "a refused create left state behind";
}

TEST_F(CliTest, AnUnknownCommandIsOneLineAndAHint) {
  CliRun typo = run({"frobnicate", "box"});
  EXPECT_EQ(typo.status, 2);
  EXPECT_EQ(typo.err, "gpubox: unknown command 'frobnicate' (see gpubox --help)\n");  // not the usage
  EXPECT_EQ(typo.out, "");
  CliRun as_json = run({"--json", "frobnicate"});
  EXPECT_EQ(as_json.status, 2);
  EXPECT_EQ(as_json.err, "");
  auto error = nlohmann::json::parse(as_json.out).at("error");
  EXPECT_EQ(error.at("code"), "usage");
  EXPECT_EQ(error.at("message"), "unknown command 'frobnicate' (see gpubox --help)");
  EXPECT_EQ(error.at("exit_code"), 2);
  CliRun hostile = run({"\x1b[2Jnope"});  // what was typed is quoted, not obeyed
  EXPECT_EQ(hostile.err, "gpubox: unknown command '\\x1b[2Jnope' (see gpubox --help)\n");
}

TEST_F(CliTest, AUsageErrorSaysWhereTheUsageIs) {
  CliRun bad_flag = run({"exec", "--bogus"});
  EXPECT_EQ(bad_flag.status, 2);
  EXPECT_THAT(bad_flag.err, HasSubstr("gpubox exec: --bogus"));
  EXPECT_THAT(bad_flag.err, HasSubstr("\nSee 'gpubox exec --help'.\n"));
  // An unknown sandbox is a usage error too, but the command's usage would not help: no hint.
  CliRun unknown_box = run({"info", "nosuchbox"});
  EXPECT_EQ(unknown_box.status, 2);
  EXPECT_THAT(unknown_box.err, ::testing::Not(HasSubstr("--help")));
}

TEST_F(CliTest, UnreadableOrRefusedConfigCreatesNothing) {
  CliRun unreadable = run({"create", "--config", scratch() + "/missing.json"});
  EXPECT_EQ(unreadable.status, 2);
  EXPECT_THAT(unreadable.err, HasSubstr("--config: cannot read '" + scratch() + "/missing.json'"));
  write_text(scratch() + "/notjson.json", "{ nope");
  CliRun garbled = run({"create", "--config", scratch() + "/notjson.json"});
  EXPECT_EQ(garbled.status, 2);
  EXPECT_THAT(garbled.err, HasSubstr("is not a JSON object"));
  write_text(scratch() + "/env.json", R"({"env": 5})");
  CliRun wrong_type = run({"create", "--config", scratch() + "/env.json", "--env", "A=1"});
  EXPECT_EQ(wrong_type.status, 2);
  EXPECT_THAT(wrong_type.err, HasSubstr("--config: env: expected an object"));
  // The agent itself refuses this one: its message comes through, and the
  // sandbox it would have been is gone without a trace.
  write_text(scratch() + "/refused.json", R"({"shutdown": {"grace_seconds": "soon"}})");
  CliRun refused = run({"create", "--config", scratch() + "/refused.json"});
  EXPECT_EQ(refused.status, 2);
  EXPECT_THAT(refused.err, HasSubstr("shutdown.grace_seconds"));
  // Named as the user gave it (the file and the flags), not as the descriptor the agent read it from.
  EXPECT_THAT(refused.err, HasSubstr("config (--config " + std::filesystem::canonical(scratch() + "/refused.json").string() +
                                     " with the flags): shutdown.grace_seconds"));
  EXPECT_THAT(refused.err, ::testing::Not(HasSubstr("--config-fd")));
  EXPECT_TRUE(store_entries().empty());
  EXPECT_EQ(run({"ls", "--json"}).out, "[]\n");
}

TEST_F(CliTest, PutToAPathThatCannotBeWritten) {
  std::string id = create();
  write_text(scratch() + "/file.txt", "content");
  CliRun to_proc = run({"put", id, scratch() + "/file.txt", "/proc/1/new-file"});
  EXPECT_EQ(to_proc.status, 1);
  EXPECT_THAT(to_proc.err, HasSubstr("gpubox put: "));
  CliRun no_parent = run({"put", id, scratch() + "/file.txt", "/workspace/no/such/dir/file.txt"});
  EXPECT_EQ(no_parent.status, 1);
  EXPECT_THAT(no_parent.err, HasSubstr("give --parents to create it"));
  CliRun missing_local = run({"put", id, scratch() + "/absent.txt", "/workspace/x"});
  EXPECT_EQ(missing_local.status, 2);
  EXPECT_THAT(missing_local.err, HasSubstr("cannot read '" + scratch() + "/absent.txt'"));
  CliRun missing_remote = run({"get", id, "/workspace/absent", scratch() + "/x"});
  EXPECT_EQ(missing_remote.status, 1);
  EXPECT_THAT(missing_remote.err, HasSubstr("not_found"));
  EXPECT_FALSE(std::filesystem::exists(scratch() + "/x"));
  // Nothing was half-written in the sandbox.
  CliRun listing = run({"exec", id, "--", "ls", "-A", "/workspace"});
  EXPECT_EQ(listing.out, "");
}

}  // namespace
}  // namespace gpubox::testing
