// AgentProcess: the real gpubox-agent binary, started for one test as a
// direct child of the test (the agent is then a subreaper), with a config
// written to a fresh temporary directory. Knows where the agent listens (the
// "rpc listening" line of STATE_DIR/agent.log) and hands out rpc::Clients.
// One thread owns an AgentProcess; the destructor SIGKILLs the agent if it
// still runs, reaps it and removes the directory.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "rpc/client.h"
#include "rpc/keys.h"

namespace gpubox::testing {

using std::chrono::milliseconds;

class AgentProcess {
 public:
  // rpc settings merged into the config; "endpoints" defaults to a tcp port 0
  // (CURVE, with a fresh server key and `client` authorized) and an ipc socket.
  struct Options {
    nlohmann::json rpc = nlohmann::json::object();
    bool authorize_client = true;        // put client_keys() on rpc.authorized_keys
    bool use_authorized_keys_file = false;  // … in DIR/authorized_keys instead
  };

  // Starts the agent and waits until it is ready; nullptr (and *error) on failure.
  static std::unique_ptr<AgentProcess> start(const Options& options, std::string* error);
  AgentProcess(const AgentProcess&) = delete;
  AgentProcess& operator=(const AgentProcess&) = delete;
  ~AgentProcess();

  pid_t pid() const { return pid_; }
  const std::string& dir() const { return dir_; }
  std::string path(const std::string& name) const { return dir_ + "/" + name; }
  const std::string& tcp_endpoint() const { return tcp_; }
  const std::string& ipc_endpoint() const { return ipc_; }
  const std::string& server_public_key() const { return server_public_key_; }
  const rpc::KeyPair& client_keys() const { return client_keys_; }
  std::string log_text() const;
  // What the agent wrote to its stderr (a sanitizer's report lands there).
  std::string stderr_text() const;

  // A client on the tcp endpoint with the authorized key pair (or `keys`).
  Result<std::unique_ptr<rpc::Client>> connect_tcp(std::optional<rpc::KeyPair> keys = std::nullopt,
                                                   milliseconds timeout = milliseconds(5000)) const;
  Result<std::unique_ptr<rpc::Client>> connect_ipc() const;

  // The agent's resident set size, from /proc/PID/status.
  std::optional<long long> rss_bytes() const;
  // Waits for the agent to exit and reaps it: its exit code, or 128 + signal.
  std::optional<int> wait_exit(milliseconds timeout);

 private:
  AgentProcess() = default;

  std::string dir_;
  pid_t pid_ = -1;
  bool reaped_ = false;
  std::string tcp_;
  std::string ipc_;
  std::string server_public_key_;
  rpc::KeyPair client_keys_;
};

// Polls cond every 5 ms until it holds or the timeout passes.
bool wait_until(const std::function<bool()>& cond, milliseconds timeout);
bool file_exists(const std::string& path);
void write_file(const std::string& path, const std::string& text);

}  // namespace gpubox::testing
