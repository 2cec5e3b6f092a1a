// The podman backend through the real CLI: real containers of the image that
// image/Dockerfile builds, reached over CURVE on a published 127.0.0.1 port.
// The CLI's sandbox tests marked TEST_P(BackendCliTest, …) run against every
// backend (instantiated here); the tests below are the container's own:
// engine limits, the relayed port of --network none, secrets kept out of
// `inspect`, logs and argv, a container killed from outside, images without
// a working agent, and flags refused before anything starts.
#include <signal.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include <gmock/gmock.h>

#include "host/program_run.h"
#include "tests/cli/cli_fixture.h"
#include "tests/image/test_image.h"

namespace gpubox::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
namespace fs = std::filesystem;

// Names the instances /local, /podman, /docker, /modal and /kubernetes.
struct BackendName {
  std::string operator()(const ::testing::TestParamInfo<std::string>& backend) const { return backend.param; }
};

#ifdef GPUBOX_SANITIZE
// A sanitized agent is not static: it cannot run in an image; the local backend still runs.
INSTANTIATE_TEST_SUITE_P(Backends, BackendCliTest, ::testing::Values("local"), BackendName());
#else
// modal: the podman image as a sandbox of the fake Modal control plane (tests/modal/fake_modal).
// docker: the same image loaded into Debian's dockerd, which ctest starts (tests/cli/docker_engine.sh).
// kubernetes: the podman image as a pod of the test cluster (tests/kubernetes/run_cluster.py).
INSTANTIATE_TEST_SUITE_P(Backends, BackendCliTest, ::testing::Values("local", "podman", "docker", "modal", "kubernetes"),
                         BackendName());
#endif

std::string trimmed(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

// Sandbox code runs under a seccomp filter (status mode 2): gpubox's (local)
// or the engine's default profile (podman, docker); --seccomp unconfined
// removes it. Modal's gVisor filters by itself, and a cluster sets the pod's
// security context: --seccomp is refused on both.
TEST_P(BackendCliTest, SandboxCodeRunsUnderASeccompFilter) {
  if (control_plane()) {
    CliRun refused = run({"create", "--seccomp", "unconfined"});
    EXPECT_EQ(refused.status, 2);
    EXPECT_THAT(refused.err, HasSubstr("--seccomp: not with --backend " + backend()));
    EXPECT_TRUE(store_entries().empty());
    return;
  }
  std::string id = create();
  EXPECT_EQ(run({"exec", id, "--", "grep", "Seccomp:", "/proc/self/status"}).out, "Seccomp:\t2\n");
  EXPECT_THAT(run({"info", id}).out,
              HasSubstr(container() ? "seccomp:     " + backend() + "'s default profile" : "seccomp:     default (gpubox's filter"));
  std::string open = create({"--seccomp", "unconfined"});
  EXPECT_EQ(run({"exec", open, "--", "grep", "Seccomp:", "/proc/self/status"}).out, "Seccomp:\t0\n");
  EXPECT_THAT(run({"info", open}).out, HasSubstr("seccomp:     unconfined -- WARNING"));
}

TEST_P(BackendCliTest, SnapshotKeepsFilesPackagesAndSettingsButNotProcesses) {
  if (kubernetes()) {
    // A pod's filesystem has no image to commit: what lasts is on a --volume claim.
    CliRun refused = run({"snapshot", create(), "--name", "snap-1"});
    EXPECT_EQ(refused.status, 2);
    EXPECT_THAT(refused.err, HasSubstr("snapshots of Kubernetes sandboxes are not supported"));
    EXPECT_EQ(run({"snapshots", "--json"}).out, "[]\n");
    return;
  }
  CliRun created = run({"create", "--name", "origin", "--env", "COLOUR=blue", "--memory", "200"});
  ASSERT_EQ(created.status, 0) << created.err;
  std::string id = trimmed(created.out);
  // Files in the work dir; for a container also a "package" outside it; and a running job.
  std::string write = "mkdir -p data && echo kept > data/file.txt";
  if (container()) write += " && echo '#!/bin/sh' > /usr/local/bin/tool && echo 'echo tool ran' >> /usr/local/bin/tool && chmod +x /usr/local/bin/tool";
  ASSERT_EQ(run({"exec", id, "--", "sh", "-c", write}).status, 0);
  ASSERT_EQ(run({"submit", id, "--", "exec sleep 300"}).status, 0);

  CliRun taken = run({"snapshot", "origin", "--name", "snap-1"});
  ASSERT_EQ(taken.status, 0) << taken.err;
  EXPECT_EQ(taken.out, "snap-1\n");
  EXPECT_THAT(taken.err, HasSubstr("running processes are not part of it"));
  EXPECT_EQ(run({"snapshot", "origin", "--name", "snap-1"}).status, 2) << "a taken snapshot name";
  auto listed = nlohmann::json::parse(run({"snapshots", "--json"}).out);
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0]["name"], "snap-1");
  EXPECT_EQ(listed[0]["kind"], modal() ? "modal_image" : container() ? "image" : "archive");
  EXPECT_EQ(listed[0]["source_id"], id);

  CliRun restored = run({"create", "--from-snapshot", "snap-1", "--name", "copy"});
  ASSERT_EQ(restored.status, 0) << restored.err;
  EXPECT_THAT(restored.err, HasSubstr("processes that ran then are not running"));
  EXPECT_EQ(run({"exec", "copy", "--", "sh", "-c", "cat data/file.txt; echo $COLOUR"}).out, "kept\nblue\n");
  if (container()) {
    EXPECT_EQ(run({"exec", "copy", "--", "tool"}).out, "tool ran\n") << "the installed package is gone";
  }
  EXPECT_EQ(nlohmann::json::parse(run({"jobs", "copy", "--json"}).out).size(), 0u) << "the job came back";
  EXPECT_EQ(nlohmann::json::parse(run({"info", "copy", "--json"}).out)["spec"]["memory_mib"], 200);
  EXPECT_EQ(run({"exec", id, "--", "cat", "data/file.txt"}).out, "kept\n") << "the origin is untouched";

  EXPECT_EQ(run({"create", "--from-snapshot", "no-such-snapshot"}).status, 2);
  EXPECT_EQ(run({"snapshot", "no-such-sandbox"}).status, 2);
  ASSERT_EQ(run({"snapshots", "rm", "snap-1"}).status, 0);
  EXPECT_EQ(run({"snapshots", "--json"}).out, "[]\n");
  if (container() && !modal()) {
    EXPECT_NE(host::run_program("podman", {"image", "exists", listed[0]["image"]})->status, 0) << "the committed image is left";
  }
  // Modal keeps a snapshot's image for 30 days by itself and has no call to delete it: only the record goes.
}

#ifndef GPUBOX_SANITIZE  // the container tests need the static agent of the default build
TEST_F(PodmanCliTest, CreateExecFilesRunCodeRpcInfoAndTerminateAContainer) {
  CliRun created = run({"--json", "create", "--name", "box", "--memory", "256", "--cpu", "1", "--pids", "512"});
  ASSERT_EQ(created.status, 0) << created.err;
  auto json = nlohmann::json::parse(created.out);
  std::string id = json["id"];
  EXPECT_EQ(json["backend"], "podman");
  EXPECT_EQ(json["state"], "running");
  std::string endpoint = json["endpoint"];
  EXPECT_THAT(endpoint, ::testing::StartsWith("tcp://127.0.0.1:"));
  nlohmann::json saved = record(id);
  std::string container = saved["spec"]["container"];
  struct stat keys {};
  std::string keys_file = store_dir() + "/" + id + "/client_keys.json";
  ASSERT_EQ(::stat(keys_file.c_str(), &keys), 0);
  EXPECT_EQ(keys.st_mode & 0777, 0600u) << "the client's secret key is the owner's only";

  // The engine enforces the limits; the container has loopback only.
  EXPECT_EQ(trimmed(podman({"inspect", "--format", "{{.State.Status}} {{.HostConfig.Memory}} {{.HostConfig.NanoCpus}} "
                                                   "{{.HostConfig.PidsLimit}} {{.HostConfig.NetworkMode}}",
                             container})),
            "running 268435456 1000000000 512 none");
  // The engine's default seccomp profile filters what runs inside (mode 2: a filter).
  CliRun inside = run({"exec", "box", "--", "sh", "-c", "cat /proc/1/comm; hostname; pwd; ls /sys/class/net; grep Seccomp: /proc/self/status"});
  EXPECT_EQ(inside.out, "gpubox-agent\nbox\n/workspace\nlo\nSeccomp:\t2\n") << inside.err;

  std::string big = random_bytes(3 << 20, 3);
  write_text(scratch() + "/big.bin", big);
  ASSERT_EQ(run({"put", id, scratch() + "/big.bin", "big.bin"}).status, 0);
  ASSERT_EQ(run({"get", id, "/workspace/big.bin", scratch() + "/big.back"}).status, 0);
  EXPECT_TRUE(read_text(scratch() + "/big.back") == big) << "the round trip changed the bytes";

  CliRun code = run({"run-code", id, "import os; print(6 * 7, os.getcwd())"});
  EXPECT_EQ(code.status, 0) << code.err;
  EXPECT_EQ(code.out, "42 /workspace\n");

  // A remote client with the sandbox's keys reaches the agent as the CLI does; one without them does not.
  CliRun remote = run({"rpc", endpoint, "sys.ping", "--server-key", saved["spec"]["server_key"], "--client-keys", keys_file});
  EXPECT_EQ(remote.status, 0) << remote.err;
  CliRun stranger = run({"rpc", endpoint, "sys.ping", "--server-key", saved["spec"]["server_key"], "--timeout", "1"});
  EXPECT_EQ(stranger.status, 3) << "a client whose key the agent does not know got through";

  CliRun info = run({"info", "box", "--json"});
  ASSERT_EQ(info.status, 0) << info.err;
  auto details = nlohmann::json::parse(info.out);
  EXPECT_EQ(details["agent"]["pid"], 1);
  EXPECT_THAT(details["spec"]["limits_enforced_by"]["memory"].get<std::string>(), HasSubstr("podman"));
  std::string text = run({"info", "box"}).out;
  EXPECT_THAT(text, HasSubstr("image:       " + test_image_tag(kTestImagePython)));
  EXPECT_THAT(text, HasSubstr("isolation:   podman's own: its namespaces and default capabilities"));
  EXPECT_THAT(text, HasSubstr("seccomp:     podman's default profile"));
  EXPECT_THAT(text, Not(HasSubstr("older gpubox")));
  EXPECT_THAT(run({"logs", "box"}).out, HasSubstr("agent ready"));

  pid_t relay = saved["spec"]["relay"]["pid"];
  CliRun terminated = run({"terminate", "box"});
  EXPECT_EQ(terminated.status, 0) << terminated.err;
  EXPECT_EQ(terminated.out, id + "\n") << "the agent stopped within its grace";
  EXPECT_NE(host::run_program("podman", {"container", "exists", container})->status, 0) << "the container is left";
  EXPECT_TRUE(store_entries().empty());
  std::string stat = read_text("/proc/" + std::to_string(relay) + "/stat");
  EXPECT_TRUE(stat.empty() || stat.find(") Z") != std::string::npos) << "the port relay still runs";
}

TEST_F(PodmanCliTest, SecretsReachTheContainerButNotInspectLogsOrArgv) {
  const std::string value = "c0nta1ner-s3cret-7f3a9e";
  CliRun created = run({"create", "--secret", "API_TOKEN", "--env", "PLAIN=visible"}, {{"API_TOKEN", value}});
  ASSERT_EQ(created.status, 0) << created.err;
  std::string id = trimmed(created.out);
  EXPECT_EQ(run({"exec", id, "--", "sh", "-c", "echo $API_TOKEN $PLAIN"}).out, value + " visible\n");
  std::string container = record(id)["spec"]["container"];
  EXPECT_EQ(podman({"inspect", container}).find(value), std::string::npos) << "the secret is in podman inspect";
  auto logs = host::run_program("podman", {"logs", container});
  ASSERT_TRUE(logs);
  EXPECT_EQ((logs->out + logs->err).find(value), std::string::npos) << "the secret is in the engine's logs";
  pid_t agent = record(id)["agent_pid"];
  EXPECT_EQ(read_text("/proc/" + std::to_string(agent) + "/cmdline").find(value), std::string::npos);
  EXPECT_EQ(read_text("/proc/" + std::to_string(agent) + "/environ").find(value), std::string::npos);
  // Nor is it left anywhere on the host: the config's tmpfs copy is gone once the agent read it.
  for (const auto& entry : fs::directory_iterator("/dev/shm")) {
    EXPECT_THAT(entry.path().filename().string(), ::testing::Not(HasSubstr("gpubox-config"))) << entry.path();
  }
  CliRun inside = run({"exec", id, "--", "sh", "-c", "ls -A /run/gpubox-config | wc -l"});
  EXPECT_EQ(inside.out, "0\n") << "the config file is still readable in the container";
}

TEST_F(PodmanCliTest, AContainerKilledFromOutsideShowsDeadAndIsCleanedUp) {
  std::string id = create();
  std::string container = record(id)["spec"]["container"];
  podman({"kill", container});
  nlohmann::json listed;
  for (int i = 0; i < 100; ++i) {
    listed = nlohmann::json::parse(run({"ls", "--json"}).out);
    if (listed[0]["state"] == "dead") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(listed[0]["state"], "dead");
  expect_dead_sandbox_cleaned_up(id);
  EXPECT_NE(host::run_program("podman", {"container", "exists", container})->status, 0);
}

TEST_F(PodmanCliTest, BridgeNetworkAFixedPublishedPortAndNoSeccomp) {
  CliRun created = run({"--json", "create", "--network", "bridge", "--publish", "127.0.0.1:0", "--seccomp", "unconfined"});
  ASSERT_EQ(created.status, 0) << created.err;
  std::string id = nlohmann::json::parse(created.out)["id"];
  EXPECT_THAT(run({"exec", id, "--", "ls", "/sys/class/net"}).out, HasSubstr("eth0"));
  EXPECT_EQ(run({"exec", id, "--", "grep", "Seccomp:", "/proc/self/status"}).out, "Seccomp:\t0\n");
  EXPECT_THAT(run({"info", id}).out, HasSubstr("seccomp:     unconfined -- WARNING: no syscall filter"));
  EXPECT_EQ(trimmed(podman({"inspect", "--format", "{{.HostConfig.NetworkMode}}", record(id)["spec"]["container"]})), "bridge");
}

// An image a user might pass by mistake: a tag built on the busybox root from a Containerfile.
std::string build_broken_image(const std::string& scratch, const std::string& tag, const std::string& agent_script) {
  fs::create_directories(scratch + "/broken");
  write_text(scratch + "/broken/gpubox-agent", agent_script, 0755);
  write_text(scratch + "/broken/Containerfile", std::string("FROM ") + kTestImageBusybox.base +
                                                    "\nCOPY gpubox-agent /usr/local/bin/gpubox-agent\n"
                                                    "ENTRYPOINT [\"/usr/local/bin/gpubox-agent\"]\n");
  auto built = host::run_program("podman", {"build", "--isolation", "chroot", "-q", "--layers=false", "-t", tag, scratch + "/broken"});
  return built && built->status == 0 ? "" : (built ? built->err : built.status().message());
}

TEST_F(PodmanCliTest, ImagesWithoutAWorkingAgentFailCreateClearlyWithinTheTimeout) {
  auto refused = [&](const std::vector<std::string>& args, int code, const std::string& message) {
    std::vector<std::string> full = {"create"};
    full.insert(full.end(), args.begin(), args.end());
    auto begin = std::chrono::steady_clock::now();
    CliRun created = run(full);
    EXPECT_EQ(created.status, code) << created.out << created.err;
    EXPECT_THAT(created.err, HasSubstr(message));
    EXPECT_LT(std::chrono::steady_clock::now() - begin, std::chrono::seconds(20));
    EXPECT_TRUE(store_entries().empty()) << "a failed create left state";
  };
  // A base without the agent: its CMD is not gpubox-agent.
  refused({"--image", kTestImageBusybox.base}, 2, "ENTRYPOINT");
  refused({"--image", "localhost/gpubox-no-such-image:none"}, 2, "no such image");
  ASSERT_EQ(build_broken_image(scratch(), "localhost/gpubox-test-broken:exits", "#!/bin/sh\necho 'agent broke' >&2\nexit 3\n"), "");
  refused({"--image", "localhost/gpubox-test-broken:exits"}, 2, "exited with status 3");
  refused({"--image", "localhost/gpubox-test-broken:exits"}, 2, "agent broke");
  ASSERT_EQ(build_broken_image(scratch(), "localhost/gpubox-test-broken:hangs", "#!/bin/sh\nexec sleep 600\n"), "");
  refused({"--image", "localhost/gpubox-test-broken:hangs", "--ready-timeout", "2"}, 3, "did not answer");
  podman({"rmi", "localhost/gpubox-test-broken:exits", "localhost/gpubox-test-broken:hangs"});
}

TEST_F(PodmanCliTest, BadContainerFlagsExitTwoAndStartNothing) {
  for (const std::vector<std::string>& flags : std::vector<std::vector<std::string>>{
           {"--gpu", "0"},
           {"--gpu", "x"},
           {"--gpu", "65"},
           {"--gpu", "1.5"},
           {"--publish", "1.2.3"},
           {"--publish", "127.0.0.1:70000"},
           {"--publish", "localhost:80"},
           {"--publish", "127.0.0.1:-1"},
           {"--image", "bad image!"},
           {"--image", ""},
           {"--network", "host"},
           {"--ready-timeout", "0"},
           {"--backend", "lxc"}}) {
    std::vector<std::string> args = {"create"};
    args.insert(args.end(), flags.begin(), flags.end());
    CliRun created = run(args);
    EXPECT_EQ(created.status, 2) << flags[0] << " " << flags[1] << ": " << created.err;
    EXPECT_THAT(created.err, HasSubstr(flags[0])) << "the message names the flag";
  }
  // Container flags make no sense for the local backend.
  CliRun local = run({"create", "--backend", "local", "--image", "x"});
  EXPECT_EQ(local.status, 2);
  EXPECT_THAT(local.err, HasSubstr("only with --backend podman or docker"));
  EXPECT_TRUE(store_entries().empty());
}

#endif  // GPUBOX_SANITIZE

}  // namespace
}  // namespace gpubox::testing
