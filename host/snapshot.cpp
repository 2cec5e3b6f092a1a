#include "host/snapshot.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <ctime>
#include <filesystem>
#include <fstream>

#include "base/fd.h"

namespace gpubox::host {
namespace {

namespace fs = std::filesystem;

Result<Snapshot> from_json(const nlohmann::json& json, const std::string& dir) {
  try {
    Snapshot snapshot;
    snapshot.name = json.at("name");
    snapshot.kind = json.at("kind");
    snapshot.backend = json.at("backend");
    snapshot.source_id = json.value("source_id", "");
    snapshot.source_name = json.value("source_name", "");
    snapshot.image = json.value("image", "");
    snapshot.created_at = json.value("created_at", 0.0);
    snapshot.size_bytes = json.value("size_bytes", std::uint64_t{0});
    snapshot.spec = json.value("spec", nlohmann::json::object());
    if (json.contains("layer")) {
      snapshot.layer_sha256 = json["layer"].at("sha256");
      snapshot.layer_size = json["layer"].value("size", std::uint64_t{0});
    }
    snapshot.dir = dir;
    return snapshot;
  } catch (const nlohmann::json::exception& e) {
    return Status(ErrorCode::invalid_request, std::string("snapshot record: ") + e.what());
  }
}

}  // namespace

std::string snapshots_dir(const SandboxStore& store) { return store.root() + "/snapshots"; }

Status write_private_file(const std::string& path, const std::string& text) {
  std::string temp = path + ".tmp";
  Fd fd(::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  if (!fd.valid() || write_fully(fd.get(), text.data(), text.size()) != 0) {
    return Status::from_errno(errno, "cannot write '" + temp + "'");
  }
  fd.reset();
  if (::rename(temp.c_str(), path.c_str()) != 0) return Status::from_errno(errno, "cannot write '" + path + "'");
  return Status::ok();
}

nlohmann::json Snapshot::to_json() const {
  nlohmann::json json = {{"name", name},         {"kind", kind},       {"backend", backend},       {"source_id", source_id},
                         {"source_name", source_name}, {"image", image}, {"created_at", created_at}, {"size_bytes", size_bytes},
                         {"spec", spec}};
  if (has_layer()) json["layer"] = {{"archive", "upper.tar.zst"}, {"sha256", layer_sha256}, {"size", layer_size}};
  return json;
}

std::vector<Snapshot> list_snapshots(const SandboxStore& store) {
  std::vector<Snapshot> found;
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(snapshots_dir(store), error)) {
    std::ifstream in(entry.path() / "snapshot.json");
    auto json = nlohmann::json::parse(in, nullptr, false);
    if (!in || json.is_discarded()) continue;
    if (auto snapshot = from_json(json, entry.path().string())) found.push_back(std::move(*snapshot));
  }
  std::sort(found.begin(), found.end(), [](const Snapshot& a, const Snapshot& b) { return a.created_at < b.created_at; });
  return found;
}

Result<Snapshot> find_snapshot(const SandboxStore& store, const std::string& name) {
  if (valid_sandbox_name(name)) {
    std::string dir = snapshots_dir(store) + "/" + name;
    std::ifstream in(dir + "/snapshot.json");
    auto json = nlohmann::json::parse(in, nullptr, false);
    if (in && !json.is_discarded()) return from_json(json, dir);
  }
  return Status(ErrorCode::not_found, "no snapshot named '" + name + "' (see gpubox snapshots)");
}

}  // namespace gpubox::host
