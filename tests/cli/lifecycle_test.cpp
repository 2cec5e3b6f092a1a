// gpubox create / exec / put / get / ls / info / logs / rpc / terminate,
// end to end through the real CLI against real local sandboxes.
#include <signal.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <random>
#include <thread>

#include <gmock/gmock.h>

#include "tests/cli/cli_fixture.h"

namespace gpubox::testing {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

TEST_F(CliTest, CreateExecPutGetTerminate) {
  std::string id = create();
  nlohmann::json saved = record(id);
  pid_t agent = saved["agent_pid"].get<pid_t>();
  ASSERT_GT(agent, 1);
  EXPECT_EQ(::kill(agent, 0), 0) << "the agent outlives create";
  EXPECT_THAT(read_text("/proc/" + std::to_string(agent) + "/status"), HasSubstr("NSpid:\t" + std::to_string(agent) + "\t1"))
      << "the agent is PID 1 of its own PID namespace";
  struct stat socket_stat {};
  ASSERT_EQ(::stat((store_dir() + "/" + id + "/host/rpc.sock").c_str(), &socket_stat), 0);
  EXPECT_EQ(socket_stat.st_mode & 0777, 0600u);
  EXPECT_EQ(::stat((store_dir() + "/" + id + "/sandbox.json").c_str(), &socket_stat), 0);
  EXPECT_EQ(socket_stat.st_mode & 0777, 0600u);

  CliRun ls = run({"ls"});
  EXPECT_EQ(ls.status, 0);
  EXPECT_THAT(ls.out, HasSubstr(id));
  EXPECT_THAT(ls.out, HasSubstr("running"));

  CliRun echo = run({"exec", id, "--", "sh", "-c", "echo hello; pwd; cat /proc/1/comm; hostname"});
  EXPECT_EQ(echo.status, 0) << echo.err;
  EXPECT_EQ(echo.out, "hello\n/workspace\ngpubox-agent\n" + id + "\n");

  // A file above the inline limit goes as a stream; a small one in one call.
  std::string big = random_bytes(5 << 20, 1), small = "small file\n";
  write_text(scratch() + "/big.bin", big);
  write_text(scratch() + "/small.txt", small, 0600);
  CliRun put_big = run({"put", id, scratch() + "/big.bin", "big.bin"});
  ASSERT_EQ(put_big.status, 0) << put_big.err;
  ASSERT_EQ(run({"put", id, scratch() + "/small.txt", "/tmp/"}).status, 0);
  CliRun inside = run({"exec", id, "--", "sh", "-c", "wc -c < /workspace/big.bin; cat /tmp/small.txt; stat -c %a /tmp/small.txt"});
  EXPECT_EQ(inside.out, std::to_string(big.size()) + "\n" + small + "600\n") << inside.err;

  ASSERT_EQ(run({"get", id, "/workspace/big.bin", scratch() + "/big.back"}).status, 0);
  EXPECT_TRUE(read_text(scratch() + "/big.back") == big) << "the round trip changed the bytes";

  // Directories, both ways.
  fs::create_directories(scratch() + "/tree/sub/deeper");
  write_text(scratch() + "/tree/a.txt", "a");
  write_text(scratch() + "/tree/sub/deeper/b.txt", "b");
  ASSERT_EQ(run({"put", id, scratch() + "/tree", "/workspace/"}).status, 0);
  CliRun listed = run({"exec", id, "--", "cat", "/workspace/tree/a.txt", "/workspace/tree/sub/deeper/b.txt"});
  EXPECT_EQ(listed.out, "ab");
  ASSERT_EQ(run({"exec", id, "--", "sh", "-c", "mkdir -p out/x && echo made > out/x/y.txt"}).status, 0);
  CliRun got = run({"get", id, "out", scratch() + "/back"});
  ASSERT_EQ(got.status, 0) << got.err;
  EXPECT_EQ(read_text(scratch() + "/back/x/y.txt"), "made\n");

  CliRun logs = run({"logs", id});
  EXPECT_EQ(logs.status, 0);
  EXPECT_THAT(logs.out, HasSubstr("agent ready"));

  std::vector<std::string> cgroups = cgroups_of(id);
  EXPECT_FALSE(cgroups.empty()) << "the pids limit has a cgroup";
  CliRun terminated = run({"terminate", id});
  EXPECT_EQ(terminated.status, 0) << terminated.err;
  EXPECT_THAT(terminated.out, HasSubstr(id));
  EXPECT_TRUE(store_entries().empty());
  EXPECT_TRUE(cgroups_of(id).empty()) << "cgroups left after terminate";
  std::string stat = read_text("/proc/" + std::to_string(agent) + "/stat");
  EXPECT_TRUE(stat.empty() || stat.find(") Z") != std::string::npos) << "the agent still runs: " << stat;
  EXPECT_EQ(run({"ls"}).out.find(id), std::string::npos);
}

TEST_P(BackendCliTest, ExitCodesAndStreamSeparation) {
  std::string id = create();
  CliRun mixed = run({"exec", id, "--", "sh", "-c", "echo out; echo err >&2; echo out2; exit 7"});
  EXPECT_EQ(mixed.status, 7);
  EXPECT_EQ(mixed.out, "out\nout2\n");
  EXPECT_EQ(mixed.err, "err\n");
  EXPECT_EQ(run({"exec", id, "--", "false"}).status, 1);
  EXPECT_EQ(run({"exec", id, "--", "true"}).status, 0);
  CliRun missing = run({"exec", id, "--", "/no/such/program"});
  EXPECT_EQ(missing.status, 127) << missing.err;
  EXPECT_THAT(missing.err, HasSubstr("/no/such/program"));
  CliRun killed = run({"exec", id, "--", "sh", "-c", "kill -TERM $$"});
  EXPECT_EQ(killed.status, 128 + SIGTERM);
  EXPECT_THAT(killed.err, HasSubstr("signal 15"));
  CliRun slow = run({"exec", id, "--timeout", "0.5", "--", "sleep", "30"});
  EXPECT_EQ(slow.status, 124);
  EXPECT_THAT(slow.err, HasSubstr("--timeout"));
  // stdin is not forwarded: a reader sees end of file at once.
  CliRun reader = run({"exec", id, "--", "cat"});
  EXPECT_EQ(reader.status, 0);
  EXPECT_EQ(reader.out, "");
  // --env and --cwd reach the command; ARGS after the command are its own.
  CliRun env = run({"exec", id, "--env", "GREETING=hi", "--cwd", "/tmp", "--", "sh", "-c", "echo $GREETING $(pwd) \"$0\"", "--json"});
  EXPECT_EQ(env.out, "hi /tmp --json\n") << env.err;
}

// Ctrl-C (SIGINT) to `gpubox exec` reaches the command; the CLI then exits with the command's code.
TEST_F(CliTest, ExecForwardsSignalsToTheCommand) {
  std::string id = create();
  std::string marker = store_dir() + "/" + id + "/work/trap-set";
  CliRun interrupted = run({"exec", id, "--", "sh", "-c", "trap 'echo got INT; exit 5' INT; touch trap-set; while :; do sleep 0.1; done"},
                           {}, [&](pid_t cli) {
                             for (int i = 0; i < 500 && !fs::exists(marker); ++i) {
                               std::this_thread::sleep_for(std::chrono::milliseconds(10));
                             }
                             ::kill(cli, SIGINT);
                           });
  EXPECT_EQ(interrupted.status, 5) << interrupted.err;
  EXPECT_EQ(interrupted.out, "got INT\n");
}

// An agent that dies while a command runs does not leave `exec` waiting forever.
TEST_F(CliTest, ExecNoticesADyingAgent) {
  std::string id = create();
  pid_t agent = record(id)["agent_pid"].get<pid_t>();
  std::string marker = store_dir() + "/" + id + "/work/started";
  auto begin = std::chrono::steady_clock::now();
  CliRun orphaned = run({"exec", id, "--", "sh", "-c", "touch started; sleep 30"}, {}, [&](pid_t) {
    for (int i = 0; i < 500 && !fs::exists(marker); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    ::kill(agent, SIGKILL);
  });
  EXPECT_EQ(orphaned.status, 3);
  EXPECT_THAT(orphaned.err, HasSubstr("agent ended while the command ran"));
  EXPECT_LT(std::chrono::steady_clock::now() - begin, std::chrono::seconds(10));
}

TEST_F(CliTest, NamesJsonInfoAndRpc) {
  CliRun created = run({"--json", "create", "--name", "alpha", "--cpu", "0.5", "--memory", "128", "--timeout", "300",
                        "--idle-timeout", "60", "--env", "A=1"});
  ASSERT_EQ(created.status, 0) << created.err;
  auto json = nlohmann::json::parse(created.out);
  std::string id = json["id"];
  EXPECT_EQ(json["name"], "alpha");
  EXPECT_EQ(json["backend"], "local");
  EXPECT_EQ(json["state"], "running");
  EXPECT_EQ(json["endpoint"], "ipc://" + store_dir() + "/" + id + "/host/rpc.sock");

  EXPECT_EQ(run({"exec", "alpha", "--", "sh", "-c", "echo $A; hostname"}).out, "1\nalpha\n");
  EXPECT_EQ(run({"exec", id.substr(0, 6), "--", "true"}).status, 0) << "a unique id prefix names the sandbox";
  CliRun again = run({"create", "--name", "alpha"});
  EXPECT_EQ(again.status, 2);
  EXPECT_THAT(again.err, HasSubstr("a sandbox named 'alpha' exists already"));
  EXPECT_EQ(store_entries().size(), 1u) << "the refused create left state behind";

  CliRun info = run({"info", "alpha", "--json"});
  ASSERT_EQ(info.status, 0) << info.err;
  auto details = nlohmann::json::parse(info.out);
  EXPECT_EQ(details["spec"]["timeout_s"], 300);
  EXPECT_EQ(details["spec"]["idle_timeout_s"], 60);
  EXPECT_EQ(details["spec"]["memory_mib"], 128);
  for (const char* resource : {"cpu", "memory", "pids"}) {
    std::string how = details["spec"]["limits_enforced_by"][resource];
    EXPECT_TRUE(how == "cgroup v1" || how == "cgroup v2") << resource << ": " << how;
  }
  EXPECT_EQ(details["agent"]["protocol_version"], 1);
  // The limits are in the kernel, not only in the record.
  for (const std::string& dir : cgroups_of(id)) {
    if (dir.find("/memory/") != std::string::npos) EXPECT_EQ(read_text(dir + "/memory.limit_in_bytes"), "134217728\n");
    if (dir.find("/cpu/") != std::string::npos) EXPECT_EQ(read_text(dir + "/cpu.cfs_quota_us"), "50000\n");
    if (dir.find("/pids/") != std::string::npos) EXPECT_EQ(read_text(dir + "/pids.max"), "4096\n");
    if (dir.find("/unified/") != std::string::npos && dir.find("memory") != std::string::npos) {
      EXPECT_EQ(read_text(dir + "/memory.max"), "134217728\n");
    }
  }
  EXPECT_EQ(cgroups_of(id).size(), 3u);
  CliRun human = run({"info", "alpha"});
  EXPECT_THAT(human.out, HasSubstr("memory:      128 MiB  (cgroup v"));

  CliRun ping = run({"rpc", "alpha", "sys.ping", R"({"x": 1})"});
  EXPECT_EQ(ping.status, 0) << ping.err;
  EXPECT_EQ(nlohmann::json::parse(ping.out)["echo"]["x"], 1);
  CliRun by_endpoint = run({"rpc", json["endpoint"].get<std::string>(), "sys.ping"});
  EXPECT_EQ(by_endpoint.status, 0) << by_endpoint.err;
  EXPECT_EQ(nlohmann::json::parse(by_endpoint.out)["pong"], true);
  EXPECT_EQ(run({"rpc", "ipc://" + scratch() + "/no.sock", "sys.ping"}).status, 3);
  // Bytes that are not UTF-8 print as {"base64": ...}: JSON has no bytes.
  ASSERT_EQ(run({"exec", id, "--", "sh", "-c", "printf '\\377\\376\\375' > /tmp/binary"}).status, 0);
  CliRun binary = run({"rpc", id, "fs.read", R"({"path": "/tmp/binary"})"});
  EXPECT_EQ(binary.status, 0) << binary.err;
  EXPECT_EQ(nlohmann::json::parse(binary.out)["data"], nlohmann::json({{"base64", "//79"}})) << binary.out;
  CliRun bad_call = run({"rpc", id, "no.such.method"});
  EXPECT_EQ(bad_call.status, 1);
  EXPECT_THAT(bad_call.err, HasSubstr("unknown_method"));
}

TEST_P(BackendCliTest, PidsLimitStopsAForkBomb) {
  if (control_plane()) {
    // Modal has no pids limit to set, and a cluster sets the pod's limits:
    // --pids is refused before anything reaches either.
    CliRun refused = run({"create", "--pids", "16"});
    EXPECT_EQ(refused.status, 2);
    EXPECT_THAT(refused.err, HasSubstr("--pids: not with --backend " + backend()));
    EXPECT_TRUE(store_entries().empty());
    return;
  }
  std::string id = create({"--pids", "16"});
  CliRun forks = run({"exec", id, "--", "sh", "-c", "for i in $(seq 40); do sleep 2 >/dev/null 2>&1 & done; echo started"});
  EXPECT_THAT(forks.err + forks.out, HasSubstr("fork")) << "40 processes started under a limit of 16";
  // The sandbox survives: once the sleepers end (2 s; later on a loaded machine) it runs commands again.
  CliRun after;
  for (int i = 0; i < 100; ++i) {
    after = run({"exec", id, "--", "true"});
    if (after.status == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(after.status, 0) << after.err;
}

TEST_F(CliTest, HelpForEveryCommand) {
  for (const char* command : {"create", "ls", "info", "exec", "put", "get", "rpc", "logs", "terminate", "snapshot", "snapshots"}) {
    CliRun help = run({command, "--help"});
    EXPECT_EQ(help.status, 0) << command;
    EXPECT_THAT(help.out, HasSubstr(std::string("usage: gpubox ") + command)) << command;
  }
  CliRun top = run({"--help"});
  EXPECT_EQ(top.status, 0);
  EXPECT_THAT(top.out, HasSubstr("exit codes"));
  EXPECT_EQ(run({}).status, 2);
}

TEST_F(CliTest, PrivateTmpWorkDirAndMounts) {
  fs::create_directories(scratch() + "/shared");
  write_text(scratch() + "/shared/data.txt", "from the host\n");
  std::string a = create({"--mount", scratch() + "/shared:/data:ro"});
  std::string b = create();
  ASSERT_EQ(run({"exec", a, "--", "sh", "-c", "echo secret > /tmp/only-in-a; echo w > /workspace/w"}).status, 0);
  EXPECT_NE(run({"exec", b, "--", "test", "-e", "/tmp/only-in-a"}).status, 0) << "/tmp is shared";
  EXPECT_NE(run({"exec", b, "--", "test", "-e", "/workspace/w"}).status, 0) << "the work dir is shared";
  EXPECT_FALSE(fs::exists("/tmp/only-in-a")) << "the sandbox wrote the host's /tmp";
  EXPECT_EQ(run({"exec", a, "--", "cat", "/data/data.txt"}).out, "from the host\n");
  CliRun write_ro = run({"exec", a, "--", "sh", "-c", "echo x > /data/new"});
  EXPECT_NE(write_ro.status, 0);
  EXPECT_THAT(write_ro.err, HasSubstr("Read-only"));
  // Only the sandbox's own processes are visible.
  CliRun ps = run({"exec", a, "--", "sh", "-c", "ls /proc | grep -c '^[0-9]'"});
  EXPECT_LE(std::stoi(ps.out), 4) << ps.out;
}

TEST_P(BackendCliTest, LogsFollowShowsWhatTheAgentWritesWhileFollowing) {
  std::string id = create();
  std::thread actor([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(1000));  // the follower has read what was there
    std::string job = run({"submit", id, "--", "echo hi"}).out;
    run({"wait", id, job.substr(0, job.find('\n'))});
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // several polls of a follower after "job staged"
    run({"rpc", id, "sys.shutdown"});
  });
  CliRun logs = run({"logs", id, "-f"});
  actor.join();
  EXPECT_EQ(logs.status, 0) << logs.err;
  EXPECT_THAT(logs.out, HasSubstr("agent ready"));
  EXPECT_THAT(logs.out, HasSubstr("job started"));
  EXPECT_THAT(logs.out, HasSubstr("job staged"));
  // On a control plane the follower polls through the agent's RPC: what the agent writes as it shuts down
  // ("shutting down", then "agent exiting") may come after its port closed, so only the host's files have it.
  if (!control_plane()) EXPECT_THAT(logs.out, HasSubstr("shutting down"));
  CliRun after = run({"logs", id});
  if (control_plane()) {
    // The log was inside the sandbox, which has ended (on Kubernetes with its pod: restartPolicy Never).
    EXPECT_EQ(after.status, 3) << after.out;
    EXPECT_THAT(after.err, HasSubstr("dead"));
  } else {
    EXPECT_EQ(after.status, 0) << after.err;
    EXPECT_THAT(after.out, HasSubstr("agent exiting"));
  }
}

TEST_P(BackendCliTest, LogsFollowEndsWhenTheSandboxEnds) {
  std::string id = create();
  std::thread stopper([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    run({"rpc", id, "sys.shutdown"});
  });
  CliRun logs = run({"logs", id, "-f"});
  stopper.join();
  EXPECT_EQ(logs.status, 0) << logs.err;
  if (control_plane()) {
    // A control plane's log is read through the agent's RPC, which closes before the agent writes "agent exiting":
    // what came through ends at the shutdown, and the follower says where the rest is.
    EXPECT_THAT(logs.out, HasSubstr("agent ready"));
    EXPECT_THAT(logs.err, HasSubstr("the sandbox ended"));
  } else {
    EXPECT_THAT(logs.out, HasSubstr("agent exiting"));
  }
  EXPECT_EQ(run({"exec", id, "--", "true"}).status, 3) << "a dead sandbox is not reachable";
}

}  // namespace
}  // namespace gpubox::testing
