// How a sandbox ended, as ls, info and exec say it: the agent's own exit
// record for the endings it chose (idle timeout, deadline, SIGTERM, shutdown
// on request), the host's inference when it left none (a crash or an outside
// kill; out of memory when the memory cgroup counted an OOM kill).
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include <gmock/gmock.h>

#include "tests/cli/cli_fixture.h"

namespace gpubox::testing {
namespace {

using ::testing::HasSubstr;

class SandboxEndTest : public CliTest {
 protected:
  // Waits (bounded) until ls says the sandbox is dead; its ls --json entry.
  nlohmann::json wait_dead(const std::string& id) {
    for (int i = 0; i < 300; ++i) {
      nlohmann::json list = nlohmann::json::parse(run({"ls", "--json"}).out, nullptr, false);
      for (const auto& entry : list) {
        if (entry.value("id", "") == id && entry.value("state", "") == "dead") return entry;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ADD_FAILURE() << "sandbox " << id << " did not end";
    return nlohmann::json::object();
  }
  void kill_agent(const std::string& id, int sig) {
    pid_t agent = record(id)["agent_pid"].get<pid_t>();
    ASSERT_EQ(::kill(agent, sig), 0);
  }
};

TEST_F(SandboxEndTest, AnIdleTimeoutIsNamedByLsInfoAndExec) {
  std::string id = create({"--idle-timeout", "1"});
  nlohmann::json entry = wait_dead(id);
  EXPECT_EQ(entry["ended"]["reason"], "idle_timeout");
  EXPECT_EQ(entry["ended"]["agent_exit_code"], 0);
  EXPECT_THAT(run({"ls"}).out, HasSubstr("dead (idle timeout)"));
  CliRun info = run({"info", id});
  EXPECT_THAT(info.out, HasSubstr("state:       dead (idle timeout)"));
  EXPECT_THAT(info.out, HasSubstr("its idle timeout (1 s) passed"));
  CliRun exec = run({"exec", id, "--", "true"});
  EXPECT_EQ(exec.status, 3);
  EXPECT_THAT(exec.err, HasSubstr("is dead: its idle timeout (1 s) passed"));
  EXPECT_THAT(exec.err, HasSubstr("`gpubox terminate " + id + "` removes it"));
}

TEST_F(SandboxEndTest, TheDeadlineSigtermAndAShutdownRequestAreEachNamed) {
  std::string deadline = create({"--timeout", "1"});
  std::string signalled = create();
  std::string asked = create();
  kill_agent(signalled, SIGTERM);
  ASSERT_EQ(run({"rpc", asked, "sys.shutdown"}).status, 0);
  EXPECT_EQ(wait_dead(deadline)["ended"]["reason"], "deadline");
  nlohmann::json terminated = wait_dead(signalled);
  EXPECT_EQ(terminated["ended"]["reason"], "terminated");
  EXPECT_THAT(terminated["ended"]["message"].get<std::string>(), HasSubstr("SIGTERM"));
  EXPECT_EQ(wait_dead(asked)["ended"]["reason"], "shutdown");
  CliRun ls = run({"ls"});
  EXPECT_THAT(ls.out, HasSubstr("dead (deadline)"));
  EXPECT_THAT(ls.out, HasSubstr("dead (terminated)"));
  EXPECT_THAT(ls.out, HasSubstr("dead (shut down)"));
  // `terminate` removes a sandbox from ls: nothing is left to describe.
  ASSERT_EQ(run({"terminate", deadline}).status, 0);
  EXPECT_THAT(run({"ls"}).out, ::testing::Not(HasSubstr(deadline)));
}

TEST_F(SandboxEndTest, AnAgentKilledFromOutsideIsACrashOrOutOfMemory) {
  std::string crashed = create();
  kill_agent(crashed, SIGKILL);
  nlohmann::json entry = wait_dead(crashed);
  EXPECT_EQ(entry["ended"]["reason"], "agent_crashed");
  EXPECT_FALSE(entry["ended"].contains("agent_exit_code"));
  EXPECT_THAT(run({"exec", crashed, "--", "true"}).err, HasSubstr("crashed or was killed"));

  // A memory cgroup that counted an OOM kill: the agent's death is put down to it.
#ifdef GPUBOX_SANITIZE
  const int limit_mib = 512;
#else
  const int limit_mib = 128;
#endif
  std::string starved = create({"--memory", std::to_string(limit_mib)});
  CliRun big = run({"exec", starved, "--", "python3", "-c", "b = b'x' * (" + std::to_string(2 * limit_mib) + " << 20)"});
  ASSERT_EQ(big.status, 128 + SIGKILL) << big.err;
  kill_agent(starved, SIGKILL);
  entry = wait_dead(starved);
  EXPECT_EQ(entry["ended"]["reason"], "out_of_memory");
  EXPECT_THAT(run({"info", starved}).out, HasSubstr("dead (out of memory)"));
}

}  // namespace
}  // namespace gpubox::testing
