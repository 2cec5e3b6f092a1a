// How the host reaches a sandbox's agent: its endpoint, and for tcp:// the
// CURVE keys. Each container sandbox gets a fresh server key pair (the secret
// half goes only into the agent's config) and a fresh client key pair, kept
// in STORE/sandboxes/ID/client_keys.json (mode 0600, the format of
// `gpubox rpc --client-keys`); the record holds the server's public key as
// spec.server_key. Any thread.
#pragma once

#include <string>

#include "host/sandbox_store.h"
#include "rpc/client.h"
#include "rpc/keys.h"
#include "base/status.h"

namespace gpubox::host {

std::string client_keys_path(const SandboxRecord& record);

// Writes the client key pair (mode 0600).
Status save_client_keys(const SandboxRecord& record, const rpc::KeyPair& keys);

// The options that connect to the record's agent (keys loaded for tcp://).
Result<rpc::ClientOptions> client_options_for(const SandboxRecord& record);

}  // namespace gpubox::host
