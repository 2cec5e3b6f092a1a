#include "tests/rpc/agent_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

namespace gpubox::testing {
namespace {

using Clock = std::chrono::steady_clock;

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

bool wait_until(const std::function<bool()>& cond, milliseconds timeout) {
  auto give_up = Clock::now() + timeout;
  while (true) {
    if (cond()) return true;
    if (Clock::now() >= give_up) return false;
    std::this_thread::sleep_for(milliseconds(5));
  }
}

bool file_exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

void write_file(const std::string& path, const std::string& text) {
  std::string temp = path + ".tmp";
  {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    out << text;
  }
  std::filesystem::rename(temp, path);
}

std::unique_ptr<AgentProcess> AgentProcess::start(const Options& options, std::string* error) {
  std::unique_ptr<AgentProcess> agent(new AgentProcess());
  char pattern[] = "/tmp/gpubox-rpc-test-XXXXXX";
  if (!::mkdtemp(pattern)) {
    *error = "mkdtemp failed";
    return nullptr;
  }
  agent->dir_ = pattern;
  auto server_keys = rpc::generate_keypair();
  auto client_keys = rpc::generate_keypair();
  if (!server_keys || !client_keys) {
    *error = "cannot generate keys";
    return nullptr;
  }
  agent->client_keys_ = *client_keys;
  agent->server_public_key_ = server_keys->public_key;

  nlohmann::json rpc = {
      {"endpoints", {"tcp://127.0.0.1:0", "ipc://" + agent->dir_ + "/rpc.sock"}},
      {"secret_key", server_keys->secret_key},
  };
  if (options.use_authorized_keys_file) {
    write_file(agent->path("authorized_keys"), "# test client\n" + client_keys->public_key + "\n");
    rpc["authorized_keys_file"] = agent->path("authorized_keys");
  } else {
    // One key is required with a tcp endpoint; an unrelated one stands in when the client is not authorized.
    rpc["authorized_keys"] = {options.authorize_client ? client_keys->public_key : server_keys->public_key};
  }
  for (const auto& [key, value] : options.rpc.items()) rpc[key] = value;
  nlohmann::json config = {{"state_dir", agent->dir_ + "/state"}, {"log", {{"level", "debug"}}}, {"rpc", rpc}};
  write_file(agent->path("config.json"), config.dump(2));

  int ready[2];
  if (::pipe2(ready, O_CLOEXEC) != 0) {
    *error = "pipe2 failed";
    return nullptr;
  }
  std::string ready_fd = "9";
  std::vector<std::string> args = {GPUBOX_AGENT_PATH, "--config", agent->path("config.json"), "--ready-fd", ready_fd,
                                   "--grace-seconds", "2"};
  std::vector<char*> argv;
  for (auto& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  std::string out_path = agent->path("agent.stdout");
  std::string err_path = agent->path("agent.stderr");
  pid_t pid = ::fork();
  if (pid < 0) {
    *error = "fork failed";
    return nullptr;
  }
  if (pid == 0) {
    // Child: only async-signal-safe calls until exec.
    ::dup2(ready[1], 9);  // dup2 clears FD_CLOEXEC on the copy
    int out = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int err = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (out >= 0) ::dup2(out, 1);
    if (err >= 0) ::dup2(err, 2);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  agent->pid_ = pid;
  ::close(ready[1]);

  // "ready\n" on the pipe, or the pipe closing (the agent died) first.
  std::string got;
  auto give_up = Clock::now() + std::chrono::seconds(20);
  while (got.find('\n') == std::string::npos && Clock::now() < give_up) {
    pollfd item{ready[0], POLLIN, 0};
    auto left = std::chrono::duration_cast<milliseconds>(give_up - Clock::now()).count();
    if (::poll(&item, 1, static_cast<int>(std::max<long long>(left, 0))) <= 0) break;
    char buffer[64];
    ssize_t n = ::read(ready[0], buffer, sizeof buffer);
    if (n <= 0) break;
    got.append(buffer, static_cast<std::size_t>(n));
  }
  ::close(ready[0]);
  if (got != "ready\n") {
    *error = "the agent did not become ready; stderr:\n" + read_all(err_path) + "\nlog:\n" + agent->log_text();
    return nullptr;
  }

  std::istringstream log(agent->log_text());
  std::string line;
  while (std::getline(log, line)) {
    auto entry = nlohmann::json::parse(line, nullptr, false);
    if (entry.is_discarded() || entry.value("msg", "") != "rpc listening") continue;
    std::istringstream endpoints(entry.value("endpoints", ""));
    std::string endpoint;
    while (endpoints >> endpoint) {
      if (endpoint.rfind("tcp://", 0) == 0) agent->tcp_ = endpoint;
      if (endpoint.rfind("ipc://", 0) == 0) agent->ipc_ = endpoint;
    }
    if (entry.value("public_key", "") != agent->server_public_key_) {
      *error = "the log names another public key than the one configured";
      return nullptr;
    }
  }
  if (agent->ipc_.empty() && agent->tcp_.empty()) {
    *error = "no \"rpc listening\" line in the log:\n" + agent->log_text();
    return nullptr;
  }
  return agent;
}

AgentProcess::~AgentProcess() {
  if (pid_ > 0 && !reaped_) {
    ::kill(pid_, SIGKILL);
    int status;
    ::waitpid(pid_, &status, 0);
  }
  if (!dir_.empty() && !std::getenv("GPUBOX_KEEP_TEST_DIRS")) {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
}

std::string AgentProcess::log_text() const { return read_all(dir_ + "/state/agent.log"); }
std::string AgentProcess::stderr_text() const { return read_all(path("agent.stderr")); }

Result<std::unique_ptr<rpc::Client>> AgentProcess::connect_tcp(std::optional<rpc::KeyPair> keys,
                                                               milliseconds timeout) const {
  rpc::ClientOptions options;
  options.endpoint = tcp_;
  options.server_public_key = server_public_key_;
  options.client_keys = keys.value_or(client_keys_);
  options.connect_timeout = timeout;
  return rpc::Client::connect(options);
}

Result<std::unique_ptr<rpc::Client>> AgentProcess::connect_ipc() const {
  rpc::ClientOptions options;
  options.endpoint = ipc_;
  return rpc::Client::connect(options);
}

std::optional<long long> AgentProcess::rss_bytes() const {
  std::ifstream status("/proc/" + std::to_string(pid_) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  }
  return std::nullopt;
}

std::optional<int> AgentProcess::wait_exit(milliseconds timeout) {
  if (reaped_) return std::nullopt;
  std::optional<int> code;
  wait_until(
      [&] {
        int status = 0;
        if (::waitpid(pid_, &status, WNOHANG) != pid_) return false;
        reaped_ = true;
        code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        return true;
      },
      timeout);
  return code;
}

}  // namespace gpubox::testing
