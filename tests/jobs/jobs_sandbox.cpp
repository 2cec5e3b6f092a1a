#include "tests/jobs/jobs_sandbox.h"

#include <dirent.h>
#include <sys/stat.h>

#include <filesystem>
#include <functional>

#include "base/sha256.h"

namespace gpubox::testing {

using nlohmann::json;

std::string sha256_hex(const std::string& bytes) {
  Sha256 hash;
  hash.update(bytes.data(), bytes.size());
  return hash.hex_digest();
}

std::unique_ptr<JobsSandbox> JobsSandbox::start(json config, const std::string& state_dir) {
  json merged = {{"shutdown", {{"grace_seconds", 2}}}, {"jobs", {{"grace_seconds", 1}}}};
  if (config.is_object()) merged.merge_patch(config);
  AgentOptions options;
  options.config = merged;
  options.state_dir = state_dir;
  std::string error;
  auto sandbox = std::unique_ptr<JobsSandbox>(new JobsSandbox());
  sandbox->box_ = AgentProcess::start(options, &error);
  if (!sandbox->box_) {
    ADD_FAILURE() << "cannot start the agent: " << error;
    return nullptr;
  }
  if (!sandbox->box_->wait_ready(kReady)) {
    ADD_FAILURE() << "agent not ready; stderr:\n" << sandbox->box_->stderr_text();
    return nullptr;
  }
  auto connected = connect_ipc(*sandbox->box_);
  if (!connected) {
    ADD_FAILURE() << "cannot connect: " << connected.status().to_string();
    return nullptr;
  }
  sandbox->client_ = std::move(*connected);
  return sandbox;
}

Result<json> JobsSandbox::call(const std::string& method, const json& params) {
  rpc::CallOptions options;
  options.timeout_ms = 60'000;
  return client_->call(method, params, std::move(options));
}

json JobsSandbox::submit(json params) {
  auto submitted = call("job.submit", params);
  EXPECT_TRUE(submitted) << submitted.status().to_string();
  return submitted ? *submitted : json::object();
}

json JobsSandbox::wait_finished(const std::string& job_id, double timeout_s) {
  auto info = call("job.wait", {{"job_id", job_id}, {"timeout_s", timeout_s}});
  EXPECT_TRUE(info) << info.status().to_string();
  if (!info) return json::object();
  EXPECT_EQ((*info)["state"], "finished") << info->dump();
  return *info;
}

Harvest open_archive(const std::string& archive_path, const json& manifest, const std::string& parent) {
  Harvest harvest;
  std::filesystem::create_directories(parent);
  std::string dest = parent + "/extracted";
  auto extracted = harvest::extract_archive(archive_path, dest);
  EXPECT_TRUE(extracted) << extracted.status().to_string();
  if (!extracted) return harvest;
  Status verified = harvest::verify_manifest(dest, manifest);
  EXPECT_TRUE(verified.is_ok()) << verified.to_string();
  harvest.manifest = manifest;
  std::function<void(const std::string&, const std::string&)> walk = [&](const std::string& dir, const std::string& prefix) {
    for (const auto& entry : std::filesystem::directory_iterator(dir)) {
      std::string name = prefix + entry.path().filename().string();
      if (entry.is_symlink()) continue;
      if (entry.is_directory()) walk(entry.path().string(), name + "/");
      else harvest.files[name] = read_file(entry.path().string());
    }
  };
  walk(dest, "");
  return harvest;
}

Harvest JobsSandbox::harvest(const std::string& job_id, std::optional<std::uint64_t> max_bytes) {
  std::string dir = box_->path("harvest-" + std::to_string(++harvests_));
  std::filesystem::create_directories(dir);
  harvest::DownloadOptions options;
  options.job_id = job_id;
  options.destination = dir + "/archive.tar.zst";
  options.max_bytes = max_bytes;
  auto downloaded = harvest::download_job_archive(*client_, options);
  EXPECT_TRUE(downloaded) << downloaded.status().to_string();
  if (!downloaded) return {};
  Harvest harvest = open_archive(options.destination, downloaded->manifest, dir);
  harvest.archive_size = downloaded->size;
  return harvest;
}

}  // namespace gpubox::testing
