// JobsSandbox: the real gpubox-agent as PID 1 of a fresh PID namespace
// (tests/support/agent_process.h), a real rpc::Client on its ipc://
// endpoint, and helpers to submit jobs, wait for them and harvest their
// archives with the host's harvest library (resumable download, hardened
// extraction, manifest check).
// One test thread owns it.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>

#include "host/harvest/archive_download.h"
#include "base/safe_extractor.h"
#include "rpc/client.h"
#include "tests/support/agent_rpc.h"

namespace gpubox::testing {

inline constexpr milliseconds kReady{10'000};

struct Harvest {
  nlohmann::json manifest;
  std::map<std::string, std::string> files;  // path in the archive → content
  std::uint64_t archive_size = 0;
};

class JobsSandbox {
 public:
  // config is merged over {"shutdown": {"grace_seconds": 2}, "jobs": {"grace_seconds": 1}}.
  static std::unique_ptr<JobsSandbox> start(nlohmann::json config = nlohmann::json::object(),
                                            const std::string& state_dir = "");
  AgentProcess& box() { return *box_; }
  rpc::Client& client() { return *client_; }
  std::string state_dir() const { return box_->state_dir(); }

  // job.submit with a plain call (inputs as attachments when given); aborts the test on error.
  nlohmann::json submit(nlohmann::json params);
  Result<nlohmann::json> call(const std::string& method, const nlohmann::json& params);
  // job.wait until finished (fails the test when it is not finished within timeout).
  nlohmann::json wait_finished(const std::string& job_id, double timeout_s = 20);
  // Downloads, extracts (hardened) and verifies the manifest; every file's content.
  Harvest harvest(const std::string& job_id, std::optional<std::uint64_t> max_bytes = std::nullopt);

 private:
  std::unique_ptr<AgentProcess> box_;
  std::unique_ptr<rpc::Client> client_;
  int harvests_ = 0;
};

// Extracts an archive file with the hardened extractor into a fresh dir
// under parent, checks it against manifest, and reads every file.
Harvest open_archive(const std::string& archive_path, const nlohmann::json& manifest, const std::string& parent);

std::string sha256_hex(const std::string& bytes);

}  // namespace gpubox::testing
