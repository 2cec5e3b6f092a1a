// gpubox exec -i and -t: local stdin forwarded to the command, and a remote
// pseudo-terminal driven from a real local one (as `docker exec -it`), with
// the window size passed on, the exit code returned, and the local terminal
// restored afterwards.
#include <termios.h>

#include <gmock/gmock.h>

#include "tests/cli/cli_fixture.h"
#include "tests/cli/terminal_session.h"

namespace gpubox::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST_F(CliTest, ExecInteractiveForwardsStdinAndWithoutItTheCommandReadsEndOfFile) {
  std::string id = create();
  std::string input = random_bytes(3 << 20, 5);  // many DATA messages: credit from the agent paces them
  write_text(scratch() + "/input.bin", input);
  CliRun expected = run({"exec", id, "--", "true"});
  ASSERT_EQ(expected.status, 0) << expected.err;
  CliRun counted = run({"exec", "-i", id, "--", "sh", "-c", "wc -c; exit 4"}, {}, nullptr, &input);
  EXPECT_EQ(counted.status, 4) << counted.err;
  EXPECT_EQ(counted.out, std::to_string(input.size()) + "\n") << "every byte of stdin reached the command";
  std::string text = "line one\nline two\n";
  CliRun catted = run({"exec", id, "--interactive", "--", "cat"}, {}, nullptr, &text);
  EXPECT_EQ(catted.out, text);
  CliRun ignored = run({"exec", id, "--", "wc", "-c"}, {}, nullptr, &text);
  EXPECT_EQ(ignored.out, "0\n") << "without -i stdin is not forwarded";
}

TEST_F(CliTest, ExecTtyWithoutATerminalStillRunsOnAPty) {
  std::string id = create();
  CliRun tty = run({"exec", "-t", id, "--", "sh", "-c", "tty; stty size; echo err >&2; exit 6"});
  EXPECT_EQ(tty.status, 6) << tty.err;
  EXPECT_THAT(tty.out, HasSubstr("/dev/pts/"));
  EXPECT_THAT(tty.out, HasSubstr("24 80\r\n")) << "the default size, with the terminal's line endings";
  EXPECT_THAT(tty.out, HasSubstr("err\r\n")) << "stderr is the terminal too";
  CliRun plain = run({"exec", id, "--", "tty"});
  EXPECT_EQ(plain.out, "not a tty\n") << "without -t there is no terminal";
  // Bad terminal params are refused by the agent with a clear message.
  CliRun bad = run({"rpc", id, "proc.spawn", R"({"argv": ["true"], "rows": 10})"});
  EXPECT_EQ(bad.status, 1);
  EXPECT_THAT(bad.err, HasSubstr("only with tty: true"));
}

TEST_F(CliTest, RpcShowsBinaryDataOnATerminalOnlyBySize) {
  std::string id = create();
  ASSERT_EQ(run({"exec", id, "--", "sh", "-c", "head -c 4096 /dev/urandom > b.bin"}).status, 0);
  const std::string params = R"({"path": "/workspace/b.bin"})";
  CliRun piped = run({"rpc", id, "fs.read", params});
  ASSERT_EQ(piped.status, 0) << piped.err;
  EXPECT_THAT(piped.out, HasSubstr("\"base64\":")) << "piped: the bytes, for a program to read";
  TerminalSession terminal({cli_path(), "rpc", id, "fs.read", params}, cli_environment(), 24, 80);
  EXPECT_TRUE(terminal.expect("4096")) << terminal.screen();
  EXPECT_EQ(terminal.wait(), 0);
  EXPECT_THAT(terminal.screen(), HasSubstr("\"bytes\""));
  EXPECT_THAT(terminal.screen(), HasSubstr("pipe stdout to get it as base64"));
  EXPECT_THAT(terminal.screen(), Not(HasSubstr("\"base64\":"))) << "no screenful of base64";
}

TEST_F(CliTest, PutAndGetDrawAProgressBarOnATerminalOnly) {
  std::string id = create();
  std::string data = random_bytes(24 << 20, 9);  // above the 8 MiB below which no bar is drawn
  write_text(scratch() + "/big.bin", data);
  TerminalSession put({cli_path(), "put", id, scratch() + "/big.bin", "big.bin"}, cli_environment(), 24, 100);
  EXPECT_TRUE(put.expect("100% 24.0/24.0 MiB")) << put.screen();
  EXPECT_EQ(put.wait(), 0) << put.screen();
  EXPECT_THAT(put.screen(), HasSubstr("[##############################]"));
  TerminalSession get({cli_path(), "get", id, "big.bin", scratch() + "/back.bin"}, cli_environment(), 24, 100);
  EXPECT_TRUE(get.expect("100% 24.0/24.0 MiB")) << get.screen();
  EXPECT_EQ(get.wait(), 0) << get.screen();
  EXPECT_EQ(read_text(scratch() + "/back.bin"), data);
  CliRun piped = run({"put", id, scratch() + "/big.bin", "again.bin"});
  EXPECT_EQ(piped.status, 0) << piped.err;
  EXPECT_THAT(piped.err, Not(HasSubstr("MiB"))) << "no bar when stderr is not a terminal";
}

TEST_F(CliTest, ExecInteractiveTtyRunsAShellLikeDockerExecIt) {
  std::string id = create();
  TerminalSession terminal({cli_path(), "exec", "-it", id, "--env", "PS1=box$ ", "--", "bash", "--norc", "--noprofile"},
                           cli_environment(), 30, 100);
  ASSERT_TRUE(terminal.expect("box$ ")) << terminal.screen();
  EXPECT_FALSE(terminal.settings().c_lflag & ECHO) << "the local terminal is in raw mode while the shell runs";
  terminal.type("tty\r");
  EXPECT_TRUE(terminal.expect("/dev/pts/")) << terminal.screen();
  ASSERT_TRUE(terminal.expect("box$ "));
  terminal.type("stty size\r");
  EXPECT_TRUE(terminal.expect("30 100")) << "the initial size: " << terminal.screen();
  ASSERT_TRUE(terminal.expect("box$ "));
  terminal.resize(40, 132);
  // SIGWINCH reaches the CLI asynchronously: ask until the new size shows.
  bool resized = false;
  for (int attempt = 0; attempt < 20 && !resized; ++attempt) {
    terminal.type("stty size\r");
    resized = terminal.expect("40 132", std::chrono::milliseconds(500));
  }
  EXPECT_TRUE(resized) << "the resize was passed on: " << terminal.screen();
  terminal.type("echo $((6*7))\r");
  EXPECT_TRUE(terminal.expect("42")) << "typed input reaches bash";
  ASSERT_TRUE(terminal.expect("box$ "));
  terminal.type("(exit 5)\r");
  ASSERT_TRUE(terminal.expect("box$ "));
  terminal.type("\x04");  // Ctrl-D: bash exits with the last command's status
  EXPECT_EQ(terminal.wait(), 5) << terminal.screen();
  termios after = terminal.settings();
  EXPECT_TRUE(after.c_lflag & ECHO) << "the local terminal's settings are restored";
  EXPECT_TRUE(after.c_lflag & ICANON);
}

TEST_F(CliTest, ExecInteractiveTtyRestoresTheTerminalWhenTheSandboxDies) {
  std::string id = create();
  TerminalSession terminal({cli_path(), "exec", "-it", id, "--env", "PS1=box$ ", "--", "bash", "--norc", "--noprofile"},
                           cli_environment(), 24, 80);
  ASSERT_TRUE(terminal.expect("box$ ")) << terminal.screen();
  pid_t agent = record(id)["agent_pid"].get<pid_t>();
  ASSERT_EQ(::kill(agent, SIGKILL), 0);
  EXPECT_EQ(terminal.wait(), 3) << terminal.screen();
  EXPECT_THAT(terminal.screen(), HasSubstr("agent ended"));
  EXPECT_TRUE(terminal.settings().c_lflag & ECHO) << "restored on the error path too";
}

}  // namespace
}  // namespace gpubox::testing
