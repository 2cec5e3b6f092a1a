#include "host/sandbox_keys.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>

#include "base/fd.h"

namespace gpubox::host {

std::string client_keys_path(const SandboxRecord& record) { return record.dir + "/client_keys.json"; }

Status save_client_keys(const SandboxRecord& record, const rpc::KeyPair& keys) {
  std::string path = client_keys_path(record);
  Fd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  std::string text = nlohmann::json{{"public_key", keys.public_key}, {"secret_key", keys.secret_key}}.dump() + "\n";
  if (!fd.valid() || write_fully(fd.get(), text.data(), text.size()) != 0) {
    return Status::from_errno(errno, "cannot write '" + path + "'");
  }
  return Status::ok();
}

Result<rpc::ClientOptions> client_options_for(const SandboxRecord& record) {
  rpc::ClientOptions options;
  options.endpoint = record.endpoint;
  if (record.endpoint.rfind("tcp://", 0) != 0) return options;
  options.server_public_key = record.spec.value("server_key", "");
  std::ifstream in(client_keys_path(record));
  auto keys = nlohmann::json::parse(in, nullptr, false);
  if (!in || !keys.is_object() || !keys.value("public_key", nlohmann::json()).is_string() ||
      !keys.value("secret_key", nlohmann::json()).is_string() || options.server_public_key.empty()) {
    return Status(ErrorCode::internal, "sandbox " + record.id + ": its CURVE keys are missing from '" + record.dir + "'");
  }
  options.client_keys = {keys["public_key"], keys["secret_key"]};
  return options;
}

}  // namespace gpubox::host
