// What local sandboxes keep apart and hold back: the network, memory, many
// sandboxes at once, secrets, and a sandbox whose agent died.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <future>
#include <set>
#include <thread>

#include <gmock/gmock.h>

#include "tests/cli/cli_fixture.h"

namespace gpubox::testing {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

// A TCP listener on the host's 127.0.0.1, on a port the kernel picks.
class Listener {
 public:
  Listener() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t size = sizeof address;
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&address), size) != 0 || ::listen(fd_, 8) != 0 ||
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &size) != 0) {
      throw std::runtime_error("listener");
    }
    port_ = ntohs(address.sin_port);
  }
  ~Listener() { ::close(fd_); }
  int port() const { return port_; }
  // True when a connection is waiting to be accepted.
  bool has_pending() const {
    pollfd fd{fd_, POLLIN, 0};
    return ::poll(&fd, 1, 0) == 1;
  }

 private:
  int fd_ = -1;
  int port_ = 0;
};

TEST_F(CliTest, NetworkNoneCannotReachTheHostsLoopback) {
  Listener listener;
  std::string connect = "exec 3<>/dev/tcp/127.0.0.1/" + std::to_string(listener.port()) + " && echo connected";
  std::string isolated = create();  // --network none is the default
  CliRun refused = run({"exec", isolated, "--", "bash", "-c", connect});
  EXPECT_NE(refused.status, 0);
  EXPECT_EQ(refused.out, "");
  EXPECT_FALSE(listener.has_pending()) << "a connection from the sandbox reached the host";
  // Inside, loopback is up and works.
  CliRun own = run({"exec", isolated, "--", "python3", "-c",
                    "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(1); "
                    "socket.create_connection(s.getsockname()); print('loopback works')"});
  EXPECT_EQ(own.out, "loopback works\n") << own.err;

  // The control: with the host's network the same command connects.
  std::string shared = create({"--network", "host"});
  CliRun reached = run({"exec", shared, "--", "bash", "-c", connect});
  EXPECT_EQ(reached.status, 0) << reached.err;
  EXPECT_EQ(reached.out, "connected\n");
  EXPECT_TRUE(listener.has_pending());
}

TEST_F(CliTest, MemoryLimitStopsAnAllocationAboveIt) {
  // The limit covers the agent too: room for it and a 16 MiB allocation. An
  // AddressSanitizer agent needs far more (shadow memory, a quarantine of freed
  // blocks) and dies when its cgroup cannot give it a page: give it that room.
#ifdef GPUBOX_SANITIZE
  const int limit_mib = 512;
#else
  const int limit_mib = 128;
#endif
  std::string id = create({"--memory", std::to_string(limit_mib)});
  CliRun small = run({"exec", id, "--", "python3", "-c", "b = b'x' * (16 << 20); print(len(b))"});
  EXPECT_EQ(small.status, 0) << small.err;
  EXPECT_EQ(small.out, std::to_string(16 << 20) + "\n");
  CliRun big = run({"exec", id, "--", "python3", "-c",
                    "b = b'x' * (" + std::to_string(2 * limit_mib) + " << 20); print('allocated')"});
  EXPECT_EQ(big.status, 128 + SIGKILL) << big.out << big.err;
  EXPECT_EQ(big.out, "");
  EXPECT_THAT(big.err, HasSubstr("out of memory"));
  EXPECT_THAT(big.err, HasSubstr(std::to_string(limit_mib) + " MiB"));
  // The sandbox itself survives its command's OOM.
  EXPECT_EQ(run({"exec", id, "--", "true"}).status, 0);
  auto info = nlohmann::json::parse(run({"info", id, "--json"}).out);
  EXPECT_GE(info["oom_kills"].get<int>(), 1);
}

// Where no cgroup is writable (forced here), memory falls back to RLIMIT_AS:
// the allocation fails inside the command, which reports it itself.
TEST_F(CliTest, RlimitFallbackWhenNoCgroupIsUsed) {
#ifdef GPUBOX_SANITIZE
  GTEST_SKIP() << "an AddressSanitizer agent reserves terabytes of address space: RLIMIT_AS stops it";
#endif
  CliRun created = run({"create", "--memory", "300", "--cpu", "1"}, {{"GPUBOX_LIMITS", "rlimit"}});
  ASSERT_EQ(created.status, 0) << created.err;
  std::string id = created.out.substr(0, 12);
  EXPECT_TRUE(cgroups_of(id).empty());
  auto info = nlohmann::json::parse(run({"info", id, "--json"}).out);
  EXPECT_THAT(info["spec"]["limits_enforced_by"]["memory"].get<std::string>(), HasSubstr("RLIMIT_AS = 300 MiB"));
  EXPECT_THAT(info["spec"]["limits_enforced_by"]["cpu"].get<std::string>(), HasSubstr("not enforced"));
  CliRun big = run({"exec", id, "--", "python3", "-c", "b = b'x' * (512 << 20)"});
  EXPECT_EQ(big.status, 1);
  EXPECT_THAT(big.err, HasSubstr("MemoryError"));
  CliRun small = run({"exec", id, "--", "python3", "-c", "b = b'x' * (32 << 20); print(len(b))"});
  EXPECT_EQ(small.status, 0) << small.err;
}

TEST_F(CliTest, EightSandboxesAtOnce) {
  constexpr int kCount = 8;
  std::vector<std::future<CliRun>> creating;
  for (int i = 0; i < kCount; ++i) {
    creating.push_back(std::async(std::launch::async, [this, i] {
      return run({"create", "--name", "box" + std::to_string(i), "--memory", "128"});
    }));
  }
  std::set<std::string> ids;
  for (auto& future : creating) {
    CliRun created = future.get();
    EXPECT_EQ(created.status, 0) << created.err;
    ids.insert(created.out.substr(0, 12));
  }
  ASSERT_EQ(ids.size(), static_cast<size_t>(kCount));
  std::vector<std::future<CliRun>> running;
  for (int i = 0; i < kCount; ++i) {
    running.push_back(std::async(std::launch::async, [this, i] {
      return run({"exec", "box" + std::to_string(i), "--", "sh", "-c", "hostname; echo $$"});
    }));
  }
  for (int i = 0; i < kCount; ++i) {
    CliRun ran = running[static_cast<size_t>(i)].get();
    EXPECT_EQ(ran.status, 0) << ran.err;
    EXPECT_THAT(ran.out, ::testing::StartsWith("box" + std::to_string(i) + "\n"));
  }
  auto list = nlohmann::json::parse(run({"ls", "--json"}).out);
  ASSERT_EQ(list.size(), static_cast<size_t>(kCount));
  for (const auto& entry : list) EXPECT_EQ(entry["state"], "running");
  CliRun terminated = run({"terminate", "--all"});
  EXPECT_EQ(terminated.status, 0) << terminated.err;
  EXPECT_TRUE(store_entries().empty());
}

TEST_P(BackendCliTest, SecretsReachTheSandboxButNoListingLogOrStateFile) {
  const std::string value = "s3cr3t-value-5d41402abc4b2a76";
  CliRun created = run({"create", "--secret", "API_TOKEN", "--env", "PLAIN=visible"}, {{"API_TOKEN", value}});
  ASSERT_EQ(created.status, 0) << created.err;
  std::string id = created.out.substr(0, 12);
  CliRun echoed = run({"exec", id, "--", "sh", "-c", "echo $API_TOKEN $PLAIN"});
  EXPECT_EQ(echoed.out, value + " visible\n");
  pid_t agent = agent_pid(id);
  EXPECT_EQ(read_text("/proc/" + std::to_string(agent) + "/cmdline").find(value), std::string::npos);
  EXPECT_EQ(read_text("/proc/" + std::to_string(agent) + "/environ").find(value), std::string::npos);
  // Sandbox code cannot read PID 1's environment or memory: the agent is not dumpable.
  CliRun probe = run({"exec", id, "--", "sh", "-c", "cat /proc/1/environ /proc/1/cmdline; head -c 65536 /proc/1/mem; true"});
  EXPECT_THAT(probe.err, HasSubstr("/proc/1/environ: Permission denied"));
  EXPECT_THAT(probe.err, HasSubstr("'/proc/1/mem' for reading: Permission denied"));
  EXPECT_EQ((probe.out + probe.err).find(value), std::string::npos);
  for (const auto& entry : fs::recursive_directory_iterator(state_home())) {
    if (!entry.is_regular_file()) continue;
    EXPECT_EQ(read_text(entry.path()).find(value), std::string::npos) << "the secret is in " << entry.path();
  }
  EXPECT_THAT(run({"info", id}).out, HasSubstr("API_TOKEN"));
  CliRun missing = run({"create", "--secret", "NOT_SET_ANYWHERE_X"});
  EXPECT_EQ(missing.status, 2);
  EXPECT_THAT(missing.err, HasSubstr("NOT_SET_ANYWHERE_X: not set"));
}

TEST_P(BackendCliTest, ADeadAgentIsShownAndCleanedUp) {
  std::string id = create();
  pid_t agent = agent_pid(id);  // on a control plane: PID 1 of the container standing in, as an OOM kill would end it
  ASSERT_EQ(::kill(agent, SIGKILL), 0);
  ASSERT_TRUE([&] {
    for (int i = 0; i < 200; ++i) {
      // A zombie (the local agent, until this subreaper reaps it) or gone (a container's, reaped by the engine).
      std::string stat = read_text("/proc/" + std::to_string(agent) + "/stat");
      if (stat.empty() || stat.find(") Z") != std::string::npos) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }());
  EXPECT_EQ(listing_after_agent_died()[0]["state"], "dead");
  expect_dead_sandbox_cleaned_up(id);
  EXPECT_TRUE(store_entries().empty());
  EXPECT_TRUE(cgroups_of(id).empty());
}

}  // namespace
}  // namespace gpubox::testing
