// CURVE and clients for an AgentProcess: fresh key pairs, the config's "rpc"
// section that authorizes the client key, the endpoints the agent reports it
// listens on, and rpc::Clients on them. Plain functions, any thread.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "rpc/client.h"
#include "rpc/keys.h"
#include "tests/support/agent_process.h"

namespace gpubox::testing {

struct AgentKeys {
  rpc::KeyPair server;  // its secret goes into the config
  rpc::KeyPair client;  // authorized by curve_rpc_config
};
Result<AgentKeys> generate_agent_keys();

// {"endpoints": endpoints, "secret_key": server's, "authorized_keys": [client's]}.
nlohmann::json curve_rpc_config(const AgentKeys& keys, const std::vector<std::string>& endpoints = {"tcp://127.0.0.1:0"});

// What the agent's last "rpc listening" log line says (logged at info): a
// tcp://HOST:0 endpoint appears with its real port. nullopt when no such line.
struct RpcListening {
  std::string tcp;  // "" when it listens on no tcp endpoint
  std::string ipc;
  std::string public_key;
};
std::optional<RpcListening> rpc_listening(const AgentProcess& agent);

// A client on the agent's default ipc endpoint (AgentProcess::ipc_endpoint).
Result<std::unique_ptr<rpc::Client>> connect_ipc(const AgentProcess& agent);
// A CURVE client on a tcp endpoint.
Result<std::unique_ptr<rpc::Client>> connect_tcp(const std::string& endpoint, const std::string& server_public_key,
                                                 const rpc::KeyPair& client_keys,
                                                 milliseconds timeout = milliseconds(5000));

}  // namespace gpubox::testing
