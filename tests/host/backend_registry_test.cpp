// The backend registry (host/backends/registry.h): each backend this build
// has is found by its name, and an unknown name is refused with the known ones.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "host/backends/registry.h"
#include "host/sandboxes/state.h"
#include "host/sandboxes/terminate.h"

namespace gpubox::host {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(BackendRegistry, ResolvesEachBackendByItsName) {
  std::vector<std::string> names;
  for (const Backend* backend : all_backends()) names.push_back(backend->name());
  EXPECT_THAT(names, ElementsAre("local", "podman", "docker", "modal", "kubernetes"));
  for (const std::string& name : names) {
    auto found = backend_named(name);
    ASSERT_TRUE(found) << found.status().message();
    EXPECT_EQ((*found)->name(), name);
    EXPECT_EQ(find_backend(name), *found);
  }
}

TEST(BackendRegistry, RefusesAnUnknownNameNamingTheKnownOnes) {
  EXPECT_EQ(find_backend("nomad"), nullptr);
  auto found = backend_named("nomad");
  ASSERT_FALSE(found);
  EXPECT_EQ(found.status().code(), ErrorCode::invalid_request);
  EXPECT_EQ(found.status().message(), "'nomad' is not available; this build has local, podman, docker, modal and kubernetes");
  EXPECT_EQ(backend_names_text(), "local, podman, docker, modal and kubernetes");
}

TEST(BackendRegistry, ARecordOfAnUnknownBackendIsRefusedByItsId) {
  SandboxRecord record;
  record.id = "0123456789ab";
  record.backend = "nomad";
  auto found = backend_of(record);
  ASSERT_FALSE(found);
  EXPECT_THAT(found.status().message(), HasSubstr("sandbox 0123456789ab: backend 'nomad' is not available"));
  Status stopped = terminate_sandbox(SandboxStore("/nonexistent"), record, std::chrono::milliseconds(1));
  EXPECT_EQ(stopped.code(), ErrorCode::invalid_request);
}

TEST(BackendRegistry, OnlyModalsAndKubernetesStatesComeFromAControlPlane) {
  for (const Backend* backend : all_backends()) {
    bool remote = backend->name() == "modal" || backend->name() == "kubernetes";
    EXPECT_EQ(backend->state_is_remote(), remote) << backend->name();
    EXPECT_EQ(backend->control_plane() != nullptr, remote) << backend->name();
  }
}

// ls --remote and adopt pick the control plane by --backend, Modal's by default.
TEST(BackendRegistry, ControlPlanesArePickedByName) {
  std::vector<std::string> names;
  for (const Backend* backend : control_plane_backends()) names.push_back(backend->name());
  EXPECT_THAT(names, ElementsAre("modal", "kubernetes"));
  auto first = control_plane_backend();
  auto named = control_plane_backend("kubernetes");
  ASSERT_TRUE(first && named);
  EXPECT_EQ((*first)->name(), "modal");
  EXPECT_EQ((*named)->name(), "kubernetes");
  auto local = control_plane_backend("podman");
  auto unknown = control_plane_backend("nomad");
  EXPECT_THAT(local.status().message(), HasSubstr("run on this host, with no control plane"));
  EXPECT_THAT(unknown.status().message(), HasSubstr("'nomad' is not available"));
}

// The host reads an agent's log only where sandbox code cannot write: a
// host-private file (local, podman), the agent's RPC (Modal, Kubernetes), or docker's own log.
TEST(BackendRegistry, TheAgentsLogComesFromWhereSandboxCodeCannotWrite) {
  SandboxRecord private_files;
  private_files.spec["agent_files_private"] = true;
  SandboxRecord shared_files;
  shared_files.id = "0123456789ab";
  shared_files.backend = "docker";
  for (const Backend* backend : all_backends()) {
    const std::string& name = backend->name();
    bool remote = name == "modal" || name == "kubernetes";
    AgentLogSource expected = remote ? AgentLogSource::through_agent : AgentLogSource::host_file;
    EXPECT_EQ(backend->agent_log_source(private_files), expected) << name;
    if (name == "docker" || name == "podman") {
      EXPECT_EQ(backend->agent_log_source(shared_files), AgentLogSource::engine) << name;
      EXPECT_EQ(backend->engine_log_command(shared_files, true),
                (std::vector<std::string>{"docker", "logs", "--follow", "gpubox-0123456789ab"}))
          << name;
    }
  }
}

TEST(BackendRegistry, ModalsStateIsWhatModalSaidLast) {
  SandboxRecord record;
  record.backend = "modal";
  EXPECT_EQ(sandbox_state(record), "creating");
  record.spec["modal_id"] = "sb-1";
  EXPECT_EQ(sandbox_state(record), "running");
  record.spec["modal_ended"] = {{"reason", "timeout"}, {"exit_code", 137}};
  EXPECT_EQ(sandbox_state(record), "dead");
  SandboxEnd end = sandbox_end(record);
  EXPECT_EQ(end.reason, "ended_on_modal");
  EXPECT_EQ(end.message, "Modal ended it: timeout");
  EXPECT_EQ(end.exit_code, 137);
}

TEST(BackendRegistry, OnlyModalAdoptsOrListsRemotely) {
  SandboxStore store("/nonexistent");
  for (const char* name : {"local", "podman", "docker"}) {
    const Backend* backend = find_backend(name);
    ASSERT_NE(backend, nullptr);
    EXPECT_EQ(backend->adopt(store, {}).status().code(), ErrorCode::invalid_request) << name;
    EXPECT_EQ(backend->list_remote("gpubox").status().code(), ErrorCode::invalid_request) << name;
  }
}

}  // namespace
}  // namespace gpubox::host
