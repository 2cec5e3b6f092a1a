// CliTest: drives the real `gpubox` binary as a subprocess against real local
// sandboxes (the real gpubox-agent as PID 1 of new namespaces, real cgroups).
// Each test gets its own XDG_STATE_HOME under /tmp, so no test touches a
// user's sandboxes; TearDown terminates every sandbox the test left and
// checks that nothing remains. The test process is a child subreaper, so the
// agents the CLI detaches are reaped here, as init would reap them.
// Needs root. One thread per test, except where a test says otherwise.
#pragma once

#include <gtest/gtest.h>
#include <sys/types.h>

#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

namespace gpubox::testing {

struct CliRun {
  int status = -1;  // exit code, or 128 + signal
  std::string out;
  std::string err;
};

class CliTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite();
  void SetUp() override;
  void TearDown() override;

  // Runs `gpubox ARGS...` with this test's XDG_STATE_HOME (and extra
  // environment), waits for it (bounded) and returns what it printed.
  // `during`, when given, runs on another thread with the CLI's pid while it runs.
  // `input`, when given, is the CLI's stdin (else /dev/null).
  CliRun run(const std::vector<std::string>& args, const std::map<std::string, std::string>& env = {},
             const std::function<void(pid_t)>& during = nullptr, const std::string* input = nullptr) const;
  // What `gpubox create` gets first in this test: {} (the local backend) here.
  virtual std::vector<std::string> backend_args() const { return {}; }
  // What the backend adds to the CLI's environment: {} here.
  virtual std::map<std::string, std::string> backend_environment() const { return {}; }
  // What the backend's own processes logged lately, for a failure's message: "" here.
  virtual std::string backend_log() const { return ""; }
  // The environment run() gives the CLI: ours, this test's XDG_STATE_HOME and GPUBOX_AGENT, the backend's, then env.
  std::vector<std::string> cli_environment(const std::map<std::string, std::string>& env = {}) const;
  // `gpubox create ARGS...`; fails the test unless it printed an id.
  std::string create(const std::vector<std::string>& args = {});
  // The store's record of a sandbox (sandbox.json).
  nlohmann::json record(const std::string& id) const;
  std::string state_home() const { return state_home_; }
  std::string store_dir() const { return state_home_ + "/gpubox/sandboxes"; }
  // Entries of the store's sandboxes directory.
  std::vector<std::string> store_entries() const;
  // For a sandbox whose agent died: exec says it is dead (exit 3), and terminate cleans it up.
  void expect_dead_sandbox_cleaned_up(const std::string& id);
  // A scratch directory on the host for the test's own files.
  std::string scratch() const { return scratch_; }

 private:
  std::string state_home_;
  std::string scratch_;
};

// A CliTest run once per backend: "local", "podman" with the image that
// image/Dockerfile builds on the Python stand-in base (tests/image/test_image.h),
// "docker" with the same image, and the control planes: "modal", that image as
// a sandbox of the fake Modal control plane (tests/modal/fake_modal;
// tests/cli/fake_modal_process.h), and "kubernetes", as a pod of the test
// cluster's one namespace (tests/kubernetes; tests/cli/test_cluster_process.h),
// each one per test process. Every `gpubox create` of the test gets --backend
// (and --image, --namespace); TearDown also checks that no container of the
// test's store (or, on a control plane, of the test's sandboxes there) is left
// running and nothing of it in the namespace. Skips, saying why, where podman
// (or the venv's SDK, or the kube-apiserver) is missing.
class BackendCliTest : public CliTest, public ::testing::WithParamInterface<std::string> {
 protected:
  static void TearDownTestSuite();
  void SetUp() override;
  void TearDown() override;
  std::vector<std::string> backend_args() const override;
  std::map<std::string, std::string> backend_environment() const override;
  std::string backend_log() const override;
  virtual std::string backend() const { return GetParam(); }
  bool container() const { return backend() != "local"; }
  bool modal() const { return backend() == "modal"; }
  bool kubernetes() const { return backend() == "kubernetes"; }
  // Sandboxes a remote control plane runs, reached through it (the agent's log, the end, no host limits).
  bool control_plane() const { return modal() || kubernetes(); }
  bool docker() const { return backend() == "docker"; }
  // The host pid of the sandbox's agent (PID 1 of its container, for podman and the control planes).
  pid_t agent_pid(const std::string& id) const;
  // `ls --json` after the test killed the agent of its one sandbox: at once, but on kubernetes once
  // that shows it dead (bounded), since a node reports a pod's end only when it notices, as a kubelet does.
  nlohmann::json listing_after_agent_died() const;

 private:
  // What the control plane runs or holds now: the fake Modal's running containers, the cluster's left().
  std::vector<std::string> control_plane_left() const;
  std::vector<std::string> control_plane_before_;  // control_plane_left() when the test began
};

// Tests of the podman backend alone (what local sandboxes do not have).
class PodmanCliTest : public BackendCliTest {
 protected:
  std::string backend() const override { return "podman"; }
  // Runs `podman ARGS...`; its stdout (the test fails when it cannot run).
  std::string podman(const std::vector<std::string>& args) const;
};

std::string cli_path();
std::string read_text(const std::string& path);
void write_text(const std::string& path, const std::string& text, int mode = 0644);
// Cgroup directories named gpubox-ID anywhere under /sys/fs/cgroup.
std::vector<std::string> cgroups_of(const std::string& id);

// `size` bytes of a seeded pseudo-random stream: file contents for transfers.
inline std::string random_bytes(size_t size, unsigned seed) {
  std::mt19937 generator(seed);
  std::string bytes(size, '\0');
  for (auto& byte : bytes) byte = static_cast<char>(generator());
  return bytes;
}

}  // namespace gpubox::testing
