#include "tests/support/agent_rpc.h"

#include <sstream>

namespace gpubox::testing {

Result<AgentKeys> generate_agent_keys() {
  auto server = rpc::generate_keypair();
  if (!server) return server.status();
  auto client = rpc::generate_keypair();
  if (!client) return client.status();
  return AgentKeys{*server, *client};
}

nlohmann::json curve_rpc_config(const AgentKeys& keys, const std::vector<std::string>& endpoints) {
  return {{"endpoints", endpoints},
          {"secret_key", keys.server.secret_key},
          {"authorized_keys", {keys.client.public_key}}};
}

std::optional<RpcListening> rpc_listening(const AgentProcess& agent) {
  std::optional<RpcListening> found;
  for (const auto& entry : agent.log_entries()) {
    if (entry.value("msg", "") != "rpc listening") continue;
    RpcListening listening;
    listening.public_key = entry.value("public_key", "");
    std::istringstream endpoints(entry.value("endpoints", ""));
    std::string endpoint;
    while (endpoints >> endpoint) {
      if (endpoint.rfind("tcp://", 0) == 0) listening.tcp = endpoint;
      if (endpoint.rfind("ipc://", 0) == 0) listening.ipc = endpoint;
    }
    found = listening;
  }
  return found;
}

Result<std::unique_ptr<rpc::Client>> connect_ipc(const AgentProcess& agent) {
  rpc::ClientOptions options;
  options.endpoint = agent.ipc_endpoint();
  return rpc::Client::connect(options);
}

Result<std::unique_ptr<rpc::Client>> connect_tcp(const std::string& endpoint, const std::string& server_public_key,
                                                 const rpc::KeyPair& client_keys, milliseconds timeout) {
  rpc::ClientOptions options;
  options.endpoint = endpoint;
  options.server_public_key = server_public_key;
  options.client_keys = client_keys;
  options.connect_timeout = timeout;
  return rpc::Client::connect(options);
}

}  // namespace gpubox::testing
