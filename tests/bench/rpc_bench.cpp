// RPC benchmark: one table, every column measured in the same run.
//  1. round trip: raw libzmq DEALER/ROUTER ping-pong with CURVE and no msgpack
//     (an in-process echo server) vs sys.ping over the agent's CURVE endpoint;
//  2. sys.ping calls/s with 1, 8 and 64 concurrent clients;
//  3. proc.exec of /bin/true vs an in-process fork+exec+wait;
//  4. 1 GiB fs.write then fs.read vs `cat FILE > /dev/null`;
//  5. the agent's RSS before and after 1,000,000 calls.
//
// usage: gpubox_bench_rpc [--quick]      (--quick: fewer samples, 64 MiB file)
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <sodium.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <thread>
#include <zmq_addon.hpp>

#include "rpc/client.h"
#include "rpc/keys.h"
#include "tests/bench/percentile.h"
#include "tests/integration/sandbox_harness.h"

namespace {

using gpubox::rpc::Client;
using gpubox::rpc::ClientOptions;
using gpubox::rpc::KeyPair;
using Clock = std::chrono::steady_clock;
using nlohmann::json;

double us_since(Clock::time_point start) { return std::chrono::duration<double, std::micro>(Clock::now() - start).count(); }

using gpubox::bench::percentile;

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "bench: %s\n", what.c_str());
  std::exit(1);
}

template <typename T>
T check(gpubox::Result<T> result, const char* what) {
  if (!result) die(std::string(what) + ": " + result.status().to_string());
  return std::move(result.value());
}

// Raw CURVE ping-pong: an echo ROUTER in a thread, a DEALER here, 1-frame messages.
std::vector<double> raw_curve_round_trips(int samples) {
  KeyPair server = check(gpubox::rpc::generate_keypair(), "keygen");
  KeyPair client = check(gpubox::rpc::generate_keypair(), "keygen");
  zmq::context_t context(1);
  zmq::socket_t router(context, zmq::socket_type::router);
  router.set(zmq::sockopt::curve_server, 1);
  router.set(zmq::sockopt::curve_secretkey, server.secret_key);
  router.set(zmq::sockopt::linger, 0);
  router.bind("tcp://127.0.0.1:*");
  std::string endpoint = router.get(zmq::sockopt::last_endpoint);
  std::atomic<bool> stop{false};
  std::thread echo([&] {
    while (!stop) {
      zmq::pollitem_t item{router.handle(), 0, ZMQ_POLLIN, 0};
      zmq::poll(&item, 1, std::chrono::milliseconds(50));
      if (!(item.revents & ZMQ_POLLIN)) continue;
      std::vector<zmq::message_t> frames;
      (void)zmq::recv_multipart(router, std::back_inserter(frames));
      zmq::send_multipart(router, frames);
    }
  });
  zmq::socket_t dealer(context, zmq::socket_type::dealer);
  dealer.set(zmq::sockopt::curve_serverkey, server.public_key);
  dealer.set(zmq::sockopt::curve_publickey, client.public_key);
  dealer.set(zmq::sockopt::curve_secretkey, client.secret_key);
  dealer.set(zmq::sockopt::linger, 0);
  dealer.connect(endpoint);
  std::vector<double> times;
  zmq::message_t reply;
  for (int i = 0; i < samples + 100; ++i) {
    auto start = Clock::now();
    dealer.send(zmq::str_buffer("ping"), zmq::send_flags::none);
    (void)dealer.recv(reply);
    if (i >= 100) times.push_back(us_since(start));
  }
  stop = true;
  echo.join();
  return times;
}

struct Agent {
  std::unique_ptr<gpubox::testing::Sandbox> sandbox;
  std::string tcp_endpoint;
  std::string server_public_key;
  KeyPair client_keys;

  std::unique_ptr<Client> connect() const {
    ClientOptions options;
    options.endpoint = tcp_endpoint;
    options.server_public_key = server_public_key;
    options.client_keys = client_keys;
    return check(Client::connect(options), "connect");
  }

  long rss_kib() const {
    std::ifstream status("/proc/" + std::to_string(sandbox->host_pid()) + "/status");
    std::string line;
    while (std::getline(status, line)) {
      if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
    }
    return -1;
  }
};

Agent start_agent() {
  Agent agent;
  KeyPair server = check(gpubox::rpc::generate_keypair(), "keygen");
  agent.client_keys = check(gpubox::rpc::generate_keypair(), "keygen");
  agent.server_public_key = server.public_key;
  gpubox::testing::SandboxOptions options;
  options.new_pid_namespace = false;
  options.config = json{{"log", {{"level", "info"}, {"stderr", false}}},
                        {"rpc",
                         {{"endpoints", {"tcp://127.0.0.1:0"}},
                          {"secret_key", server.secret_key},
                          {"authorized_keys", {agent.client_keys.public_key}}}}};
  std::string error;
  agent.sandbox = gpubox::testing::Sandbox::start(options, &error);
  if (!agent.sandbox || !agent.sandbox->wait_ready(std::chrono::seconds(10))) die("agent did not start: " + error);
  for (const auto& entry : agent.sandbox->log_entries()) {
    if (entry.value("msg", "") != "rpc listening") continue;
    std::string endpoints = entry.value("endpoints", "");
    auto at = endpoints.find("tcp://");
    agent.tcp_endpoint = endpoints.substr(at, endpoints.find(' ', at) - at);
  }
  if (agent.tcp_endpoint.empty()) die("no tcp endpoint in the agent's log");
  return agent;
}

double calls_per_second(const Agent& agent, int clients, std::chrono::milliseconds duration, std::uint64_t* total) {
  std::atomic<std::uint64_t> calls{0};
  std::atomic<bool> go{false}, stop{false};
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&] {
      auto client = agent.connect();
      while (!go) std::this_thread::yield();
      std::uint64_t mine = 0;
      while (!stop) {
        auto pong = client->call("sys.ping");
        if (!pong) die("sys.ping: " + pong.status().to_string());
        ++mine;
      }
      calls += mine;
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200 + 5 * clients));  // connections and handshakes
  auto start = Clock::now();
  go = true;
  std::this_thread::sleep_for(duration);
  stop = true;
  for (auto& thread : threads) thread.join();
  double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (total) *total += calls;
  return static_cast<double>(calls) / seconds;
}

double fork_exec_true_us() {
  auto start = Clock::now();
  pid_t pid = ::fork();
  if (pid == 0) {
    ::execl("/bin/true", "true", nullptr);
    ::_exit(127);
  }
  int status;
  ::waitpid(pid, &status, 0);
  return us_since(start);
}

std::string hex(const unsigned char* bytes, std::size_t n) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  for (std::size_t i = 0; i < n; ++i) {
    out += kDigits[bytes[i] >> 4];
    out += kDigits[bytes[i] & 15];
  }
  return out;
}

// Uploads `size` bytes (streamed, 1 MiB chunks) and returns MB/s.
double upload(Client& client, const std::string& path, std::size_t size) {
  std::string chunk(1 << 20, '\0');
  std::mt19937_64 random(7);
  for (std::size_t i = 0; i + 8 <= chunk.size(); i += 8) {
    std::uint64_t v = random();
    std::memcpy(&chunk[i], &v, 8);
  }
  crypto_hash_sha256_state hash;
  crypto_hash_sha256_init(&hash);
  for (std::size_t sent = 0; sent < size; sent += chunk.size()) {
    crypto_hash_sha256_update(&hash, reinterpret_cast<const unsigned char*>(chunk.data()), chunk.size());
  }
  unsigned char digest[32];
  crypto_hash_sha256_final(&hash, digest);
  auto start = Clock::now();
  auto stream = check(client.stream("fs.write", json{{"path", path}, {"size", size}, {"sha256", hex(digest, 32)}}), "fs.write");
  for (std::size_t sent = 0; sent < size; sent += chunk.size()) {
    std::vector<zmq::message_t> attachment;
    attachment.emplace_back(chunk.data(), chunk.size());
    if (auto status = stream->send(json::object(), std::move(attachment)); !status) die("fs.write DATA: " + status.to_string());
  }
  if (auto status = stream->send(json{{"eof", true}}); !status) die("fs.write eof: " + status.to_string());
  while (!stream->ended()) (void)stream->next();
  if (!stream->result()) die("fs.write: " + stream->result().status().to_string());
  return static_cast<double>(size) / 1e6 / (us_since(start) / 1e6);
}

double download(Client& client, const std::string& path, std::size_t size) {
  auto start = Clock::now();
  gpubox::rpc::CallOptions options;
  options.window = 32;
  auto stream = check(client.stream("fs.read", json{{"path", path}}, options), "fs.read");
  std::size_t received = 0;
  while (true) {
    auto next = stream->next();
    if (!next) die("fs.read: " + next.status().to_string());
    if (!next->has_value()) break;
    for (const auto& attachment : (*next)->attachments) received += attachment.size();
  }
  if (!stream->result()) die("fs.read: " + stream->result().status().to_string());
  if (received != size) die("fs.read: got " + std::to_string(received) + " bytes, expected " + std::to_string(size));
  return static_cast<double>(size) / 1e6 / (us_since(start) / 1e6);
}

double cat_mb_per_s(const std::string& path, std::size_t size) {
  auto start = Clock::now();
  std::string command = "cat '" + path + "' > /dev/null";
  if (std::system(command.c_str()) != 0) die("cat failed");
  return static_cast<double>(size) / 1e6 / (us_since(start) / 1e6);
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  if (sodium_init() < 0) die("sodium_init");
  int samples = quick ? 2000 : 20000;
  std::size_t file_size = quick ? (64u << 20) : (1u << 30);
  std::uint64_t million_target = quick ? 100'000 : 1'000'000;

  Agent agent = start_agent();
  std::printf("gpubox RPC benchmark (%s run), agent pid %d, CURVE over %s\n\n", quick ? "quick" : "full",
              agent.sandbox->host_pid(), agent.tcp_endpoint.c_str());

  auto raw = raw_curve_round_trips(samples);
  std::vector<double> ping;
  {
    auto client = agent.connect();
    for (int i = 0; i < samples + 100; ++i) {
      auto start = Clock::now();
      if (auto pong = client->call("sys.ping"); !pong) die("sys.ping: " + pong.status().to_string());
      if (i >= 100) ping.push_back(us_since(start));
    }
  }
  std::printf("%-44s %12s %12s %8s\n", "measure", "gpubox", "baseline", "ratio");
  auto row = [](const char* name, double ours, double base, const char* unit) {
    std::printf("%-44s %9.1f %-2s %9.1f %-2s %7.2fx\n", name, ours, unit, base, unit, ours / base);
  };
  row("round trip p50 (sys.ping vs raw CURVE)", percentile(ping, 0.5), percentile(raw, 0.5), "us");
  row("round trip p99 (sys.ping vs raw CURVE)", percentile(ping, 0.99), percentile(raw, 0.99), "us");

  long rss_before = agent.rss_kib();
  std::uint64_t total_calls = 0;
  auto window = std::chrono::milliseconds(quick ? 1000 : 3000);
  double one = calls_per_second(agent, 1, window, &total_calls);
  double eight = calls_per_second(agent, 8, window, &total_calls);
  double many = calls_per_second(agent, 64, window, &total_calls);
  std::printf("%-44s %9.0f /s\n", "sys.ping calls/s, 1 client", one);
  std::printf("%-44s %9.0f /s\n", "sys.ping calls/s, 8 clients", eight);
  std::printf("%-44s %9.0f /s\n", "sys.ping calls/s, 64 clients", many);

  std::vector<double> exec_times, fork_times;
  {
    auto client = agent.connect();
    for (int i = 0; i < (quick ? 50 : 300); ++i) {
      auto start = Clock::now();
      auto result = client->call("proc.exec", json{{"argv", {"/bin/true"}}});
      if (!result || (*result)["exit_code"] != 0) die("proc.exec /bin/true failed");
      exec_times.push_back(us_since(start));
      fork_times.push_back(fork_exec_true_us());
    }
  }
  row("proc.exec(/bin/true) p50 vs fork+exec+wait", percentile(exec_times, 0.5) / 1000, percentile(fork_times, 0.5) / 1000, "ms");

  {
    auto client = agent.connect();
    std::string path = agent.sandbox->dir() + "/big.bin";
    double up = upload(*client, path, file_size);
    double down = download(*client, path, file_size);
    double cat = cat_mb_per_s(path, file_size);
    char label[64];
    std::snprintf(label, sizeof label, "fs.write %zu MiB vs cat to /dev/null", file_size >> 20);
    row(label, up, cat, "MB/s");
    std::snprintf(label, sizeof label, "fs.read %zu MiB vs cat to /dev/null", file_size >> 20);
    row(label, down, cat, "MB/s");
    ::unlink(path.c_str());
  }

  // RSS across a long run of calls (8 clients until the target count).
  while (total_calls < million_target) calls_per_second(agent, 8, std::chrono::milliseconds(2000), &total_calls);
  long rss_after = agent.rss_kib();
  std::printf("%-44s %9ld KiB -> %ld KiB after %llu calls (%+.1f MiB)\n", "agent RSS", rss_before, rss_after,
              static_cast<unsigned long long>(total_calls), static_cast<double>(rss_after - rss_before) / 1024.0);

  agent.sandbox->signal(SIGTERM);
  agent.sandbox->wait_exit(std::chrono::seconds(10));
  return 0;
}
