// RPC benchmark: one table, every column measured in the same run.
//  1. round trip: raw libzmq DEALER/ROUTER ping-pong with CURVE and no msgpack
//     (an in-process echo server) vs sys.ping over the agent's CURVE endpoint;
//  2. sys.ping calls/s with 1, 8 and 64 concurrent clients, each with 1 call
//     in flight (a synchronous caller) and with 16 (a pipelining one), vs the
//     same clients against the raw CURVE echo server;
//  3. proc.exec of /bin/true vs an in-process fork+exec+wait;
//  4. 1 GiB fs.write then fs.read on tmpfs vs `cat FILE > /dev/null`, and
//     fs.write to disk (fsync'd) vs `dd conv=fsync` of the same size;
//  5. the agent's RSS after a warm-up and after 1,000,000 more calls (before 3 and 4).
//
// usage: gpubox_bench_rpc [--quick] [--only SECTION]
//   --quick: fewer samples, 64 MiB files, 100k calls;
//   --only: one of latency, calls, exec, files, rss (e.g. to profile it).
// The files section also prints CPU seconds per GiB by thread (bench and
// agent) for each transfer; GPUBOX_BENCH_PHASES=1 prints its phases' times.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <random>
#include <thread>
#include <zmq_addon.hpp>

#include "rpc/client.h"
#include "rpc/keys.h"
#include "base/sha256.h"
#include "tests/bench/percentile.h"
#include "tests/bench/thread_cpu.h"
#include "tests/support/agent_rpc.h"

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

// The baseline server: a ROUTER with CURVE (no ZAP, no msgpack) echoing every
// message from one thread, as the agent's I/O thread would at best. A large
// message (a bulk transfer) is answered with a 2-byte ack instead.
class RawEcho {
 public:
  RawEcho() : server_(check(gpubox::rpc::generate_keypair(), "keygen")), client_(check(gpubox::rpc::generate_keypair(), "keygen")) {
    router_.set(zmq::sockopt::curve_server, 1);
    router_.set(zmq::sockopt::curve_secretkey, server_.secret_key);
    router_.set(zmq::sockopt::linger, 0);
    router_.set(zmq::sockopt::sndhwm, 0);
    router_.bind("tcp://127.0.0.1:*");
    endpoint_ = router_.get(zmq::sockopt::last_endpoint);
    echo_ = std::thread([this] {
      while (!stop_) {
        zmq::pollitem_t item{router_.handle(), 0, ZMQ_POLLIN, 0};
        zmq::poll(&item, 1, std::chrono::milliseconds(50));
        std::vector<zmq::message_t> frames;
        while (zmq::recv_multipart(router_, std::back_inserter(frames), zmq::recv_flags::dontwait)) {
          if (frames.size() == 2 && frames[1].size() > 64) frames[1].rebuild("ok", 2);
          zmq::send_multipart(router_, frames);
          frames.clear();
        }
      }
    });
  }
  ~RawEcho() {
    stop_ = true;
    echo_.join();
  }

  // A DEALER connected to the echo server, on its own context (as each gpubox Client has).
  struct Connection {
    zmq::context_t context{1};
    zmq::socket_t dealer{context, zmq::socket_type::dealer};
  };
  std::unique_ptr<Connection> connect() const {
    auto connection = std::make_unique<Connection>();
    connection->dealer.set(zmq::sockopt::curve_serverkey, server_.public_key);
    connection->dealer.set(zmq::sockopt::curve_publickey, client_.public_key);
    connection->dealer.set(zmq::sockopt::curve_secretkey, client_.secret_key);
    connection->dealer.set(zmq::sockopt::linger, 0);
    connection->dealer.connect(endpoint_);
    return connection;
  }

 private:
  KeyPair server_, client_;
  zmq::context_t context_{1};
  zmq::socket_t router_{context_, zmq::socket_type::router};
  std::string endpoint_;
  std::atomic<bool> stop_{false};
  std::thread echo_;
};

std::vector<double> raw_round_trips(const RawEcho& echo, int samples) {
  auto connection = echo.connect();
  std::vector<double> times;
  zmq::message_t reply;
  for (int i = 0; i < samples + 100; ++i) {
    auto start = Clock::now();
    connection->dealer.send(zmq::str_buffer("ping"), zmq::send_flags::none);
    (void)connection->dealer.recv(reply);
    if (i >= 100) times.push_back(us_since(start));
  }
  return times;
}

// Runs `clients` threads, each calling one_client(go, stop) after setting up
// its connection; returns calls/s over `duration`, adding the calls to *total.
template <typename OneClient>
double measure_calls(int clients, std::chrono::milliseconds duration, std::uint64_t* total, OneClient one_client) {
  std::atomic<std::uint64_t> calls{0};
  std::atomic<int> ready{0};
  std::atomic<bool> go{false}, stop{false};
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&] { calls += one_client(ready, go, stop); });
  }
  while (ready < clients) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  auto start = Clock::now();
  go = true;
  std::this_thread::sleep_for(duration);
  stop = true;
  for (auto& thread : threads) thread.join();
  double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (total) *total += calls;
  return static_cast<double>(calls) / seconds;
}

void wait_for(const std::atomic<bool>& go) {
  while (!go) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

// MB/s of `size` bytes sent to the echo server in 1 MiB messages, 32 in flight
// (the window fs.write and fs.read use): the CURVE transfer, nothing else.
double raw_stream_mb_per_s(RawEcho::Connection& connection, std::size_t size) {
  zmq::message_t reply;
  connection.dealer.send(zmq::str_buffer("ping"), zmq::send_flags::none);
  (void)connection.dealer.recv(reply);
  std::string chunk(1 << 20, 'x');
  std::size_t chunks = size / chunk.size(), sent = 0, acked = 0;
  auto start = Clock::now();
  while (acked < chunks) {
    while (sent < chunks && sent - acked < 32) {
      zmq::message_t message(chunk.data(), chunk.size(), [](void*, void*) {}, nullptr);  // zero-copy, as in upload()
      connection.dealer.send(message, zmq::send_flags::none);
      ++sent;
    }
    (void)connection.dealer.recv(reply);
    ++acked;
  }
  return static_cast<double>(size) / 1e6 / (us_since(start) / 1e6);
}

double raw_calls_per_second(const RawEcho& echo, int clients, int depth, std::chrono::milliseconds duration) {
  return measure_calls(clients, duration, nullptr, [&](std::atomic<int>& ready, std::atomic<bool>& go, std::atomic<bool>& stop) {
    auto connection = echo.connect();
    zmq::message_t reply;
    connection->dealer.send(zmq::str_buffer("ping"), zmq::send_flags::none);  // handshake done
    (void)connection->dealer.recv(reply);
    ++ready;
    wait_for(go);
    std::uint64_t mine = 0;
    for (int i = 0; i < depth; ++i) connection->dealer.send(zmq::str_buffer("ping"), zmq::send_flags::none);
    while (!stop) {
      (void)connection->dealer.recv(reply);
      connection->dealer.send(zmq::str_buffer("ping"), zmq::send_flags::none);
      ++mine;
    }
    for (int i = 0; i < depth; ++i) (void)connection->dealer.recv(reply);
    return mine;
  });
}

struct Agent {
  std::unique_ptr<gpubox::testing::AgentProcess> sandbox;
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

  long rss_kib() const { return static_cast<long>(sandbox->rss_bytes().value_or(-1024) / 1024); }
};

Agent start_agent() {
  Agent agent;
  auto keys = check(gpubox::testing::generate_agent_keys(), "keygen");
  agent.client_keys = keys.client;
  agent.server_public_key = keys.server.public_key;
  gpubox::testing::AgentOptions options;
  options.new_pid_namespace = false;
  options.config = json{{"log", {{"level", "info"}, {"stderr", false}}}, {"rpc", gpubox::testing::curve_rpc_config(keys)}};
  std::string error;
  agent.sandbox = gpubox::testing::AgentProcess::start_ready(options, &error, std::chrono::seconds(10));
  if (!agent.sandbox) die("agent did not start: " + error);
  auto listening = gpubox::testing::rpc_listening(*agent.sandbox);
  if (!listening || listening->tcp.empty()) die("no tcp endpoint in the agent's log");
  agent.tcp_endpoint = listening->tcp;
  return agent;
}

// sys.ping calls/s from `clients` connections, each on its own thread with
// `depth` calls in flight (1: call and wait, as a synchronous caller does).
double calls_per_second(const Agent& agent, int clients, int depth, std::chrono::milliseconds duration,
                        std::uint64_t* total) {
  return measure_calls(clients, duration, total, [&](std::atomic<int>& ready, std::atomic<bool>& go, std::atomic<bool>& stop) {
    auto client = agent.connect();
    ++ready;
    wait_for(go);
    std::deque<std::unique_ptr<gpubox::rpc::Stream>> open;
    std::uint64_t mine = 0;
    while (!stop) {
      while (static_cast<int>(open.size()) < depth) open.push_back(check(client->stream("sys.ping"), "sys.ping"));
      auto& oldest = *open.front();
      while (!oldest.ended()) (void)oldest.next();
      if (!oldest.result()) die("sys.ping: " + oldest.result().status().to_string());
      open.pop_front();
      ++mine;
    }
    for (auto& stream : open) {
      while (!stream->ended()) (void)stream->next();
    }
    return mine;
  });
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

// What upload() sends: one random 1 MiB chunk repeated, and the SHA-256 of
// `size` bytes of it (computed before the clock starts).
struct UploadContent {
  std::string chunk;
  std::string sha256;
};

UploadContent make_upload_content(std::size_t size) {
  UploadContent content;
  content.chunk.assign(1 << 20, '\0');
  std::mt19937_64 random(7);
  for (std::size_t i = 0; i + 8 <= content.chunk.size(); i += 8) {
    std::uint64_t v = random();
    std::memcpy(&content.chunk[i], &v, 8);
  }
  gpubox::Sha256 hash;
  for (std::size_t sent = 0; sent < size; sent += content.chunk.size()) hash.update(content.chunk.data(), content.chunk.size());
  content.sha256 = hash.hex_digest();
  return content;
}

// Uploads `size` bytes of content (streamed, 1 MiB chunks) and returns MB/s.
double upload(Client& client, const std::string& path, std::size_t size, const UploadContent& content) {
  const std::string& chunk = content.chunk;
  const std::string& digest = content.sha256;
  auto start = Clock::now();
  auto stream = check(client.stream("fs.write", json{{"path", path}, {"size", size}, {"sha256", digest}}), "fs.write");
  for (std::size_t sent = 0; sent < size; sent += chunk.size()) {
    // Zero-copy, as a client sending from an mmap'd file does: the chunk outlives the transfer.
    std::vector<zmq::message_t> attachment;
    attachment.emplace_back(const_cast<char*>(chunk.data()), chunk.size(), [](void*, void*) {}, nullptr);
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

// MB/s of a shell command that moves `size` bytes.
double command_mb_per_s(const std::string& command, std::size_t size) {
  auto start = Clock::now();
  if (std::system(command.c_str()) != 0) die("failed: " + command);
  return static_cast<double>(size) / 1e6 / (us_since(start) / 1e6);
}

// With GPUBOX_BENCH_PHASES set, prints a phase's bounds on CLOCK_MONOTONIC to
// stderr: the times `perf record -k CLOCK_MONOTONIC` + `perf report --time` take.
void mark_phase(const std::string& what, const char* edge) {
  if (!std::getenv("GPUBOX_BENCH_PHASES")) return;
  timespec now;
  ::clock_gettime(CLOCK_MONOTONIC, &now);
  std::fprintf(stderr, "phase %s %s %ld.%09ld\n", what.c_str(), edge, static_cast<long>(now.tv_sec), now.tv_nsec);
}

// A directory for the transfers, removed at exit.
struct ScratchDir {
  explicit ScratchDir(const std::string& parent) {
    std::string pattern = parent + "/gpubox-bench-XXXXXX";
    if (!::mkdtemp(pattern.data())) die("mkdtemp under " + parent);
    path = pattern;
  }
  ~ScratchDir() { (void)std::system(("rm -rf '" + path + "'").c_str()); }
  std::string path;
};

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  std::string only;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else if (std::strcmp(argv[i], "--only") == 0 && i + 1 < argc) {
      only = argv[++i];
    } else {
      die(std::string("unknown argument '") + argv[i] + "'; usage: gpubox_bench_rpc [--quick] [--only latency|calls|exec|files|rss]");
    }
  }
  auto runs = [&](const char* section) { return only.empty() || only == section; };
  int samples = quick ? 2000 : 20000;
  std::size_t file_size = quick ? (64u << 20) : (1u << 30);
  std::uint64_t million_target = quick ? 100'000 : 1'000'000;

  Agent agent = start_agent();
  std::printf("gpubox RPC benchmark (%s run), agent pid %d, CURVE over %s\n\n", quick ? "quick" : "full",
              agent.sandbox->pid(), agent.tcp_endpoint.c_str());

  RawEcho echo;
  std::printf("%-52s %14s %14s %8s\n", "measure", "gpubox", "baseline", "ratio");
  auto row = [](const std::string& name, double ours, double base, const char* unit) {
    std::printf("%-52s %9.1f %-4s %9.1f %-4s %7.2fx\n", name.c_str(), ours, unit, base, unit, ours / base);
  };
  if (runs("latency")) {
    auto raw = raw_round_trips(echo, samples);
    std::vector<double> ping;
    auto client = agent.connect();
    for (int i = 0; i < samples + 100; ++i) {
      auto start = Clock::now();
      if (auto pong = client->call("sys.ping"); !pong) die("sys.ping: " + pong.status().to_string());
      if (i >= 100) ping.push_back(us_since(start));
    }
    row("round trip p50 (sys.ping vs raw CURVE)", percentile(ping, 0.5), percentile(raw, 0.5), "us");
    row("round trip p99 (sys.ping vs raw CURVE)", percentile(ping, 0.99), percentile(raw, 0.99), "us");
  }

  std::uint64_t total_calls = 0;
  auto window = std::chrono::milliseconds(quick ? 1000 : 3000);
  for (int depth : {1, 16}) {
    for (int clients : {1, 8, 64}) {
      if (!runs("calls")) break;
      double ours = calls_per_second(agent, clients, depth, window, &total_calls);
      double base = raw_calls_per_second(echo, clients, depth, window);
      row("calls/s, " + std::to_string(clients) + " client(s) x " + std::to_string(depth) + " in flight (vs raw echo)",
          ours / 1000, base / 1000, "k/s");
    }
  }

  // RSS across a long run of calls (8 clients x 16 in flight), after the calls/s
  // rows above as the warm-up, and before the transfers (their buffers are
  // another matter, measured by nothing here).
  if (runs("rss")) {
    if (total_calls == 0) calls_per_second(agent, 8, 16, window, &total_calls);  // the warm-up
    long rss_before = agent.rss_kib();
    std::uint64_t counted_from = total_calls;
    while (total_calls - counted_from < million_target) {
      calls_per_second(agent, 8, 16, std::chrono::milliseconds(2000), &total_calls);
    }
    long rss_after = agent.rss_kib();
    std::printf("%-52s %9ld KiB -> %ld KiB after %llu more calls (%+.1f MiB)\n", "agent RSS", rss_before, rss_after,
                static_cast<unsigned long long>(total_calls - counted_from),
                static_cast<double>(rss_after - rss_before) / 1024.0);
  }

  if (runs("exec")) {
    std::vector<double> exec_times, fork_times;
    auto client = agent.connect();
    for (int i = 0; i < (quick ? 50 : 300); ++i) {
      auto start = Clock::now();
      auto result = client->call("proc.exec", json{{"argv", {"/bin/true"}}});
      if (!result || (*result)["exit_code"] != 0) die("proc.exec /bin/true failed");
      exec_times.push_back(us_since(start));
      fork_times.push_back(fork_exec_true_us());
    }
    row("proc.exec(/bin/true) p50 vs fork+exec+wait", percentile(exec_times, 0.5) / 1000, percentile(fork_times, 0.5) / 1000, "ms");
  }

  std::string mib = std::to_string(file_size >> 20) + " MiB";
  if (runs("files")) {
    // tmpfs (a sandbox's /tmp): the transfer itself, no disk in the way.
    ScratchDir scratch("/dev/shm");
    auto client = agent.connect();
    std::string path = scratch.path + "/big.bin";
    // CPU seconds per GiB by thread, for each transfer: what bounds it on a busy machine.
    using gpubox::bench::ThreadCpu;
    double gib = static_cast<double>(file_size) / (1u << 30);
    std::vector<std::string> cpu_lines;
    auto measured = [&](const std::string& what, auto transfer) {
      mark_phase(what, "start");
      ThreadCpu bench_before = ThreadCpu::of(::getpid()), agent_before = ThreadCpu::of(agent.sandbox->pid());
      double mb_per_s = transfer();
      ThreadCpu bench_after = ThreadCpu::of(::getpid()), agent_after = ThreadCpu::of(agent.sandbox->pid());
      mark_phase(what, "end");
      cpu_lines.push_back(what + ": bench " + ThreadCpu::used(bench_before, bench_after, gib) + ", agent " +
                          ThreadCpu::used(agent_before, agent_after, gib));
      return mb_per_s;
    };
    UploadContent content = make_upload_content(file_size);
    double up = measured("fs.write", [&] { return upload(*client, path, file_size, content); });
    double down = measured("fs.read", [&] { return download(*client, path, file_size); });
    double cat = command_mb_per_s("cat '" + path + "' > /dev/null", file_size);
    row("fs.write " + mib + " to tmpfs vs cat to /dev/null", up, cat, "MB/s");
    row("fs.read " + mib + " from tmpfs vs cat to /dev/null", down, cat, "MB/s");
    auto raw_connection = echo.connect();  // outlives the measure: its I/O thread's CPU is counted
    double raw = measured("raw CURVE stream (both ends in the bench)", [&] { return raw_stream_mb_per_s(*raw_connection, file_size); });
    row("fs.write " + mib + " to tmpfs vs raw CURVE stream", up, raw, "MB/s");
    row("fs.read " + mib + " from tmpfs vs raw CURVE stream", down, raw, "MB/s");
    std::printf("  CPU s per GiB, by thread:\n");
    for (const auto& line : cpu_lines) std::printf("    %s\n", line.c_str());
  }
  if (runs("files")) {
    // Disk: fs.write fsyncs before its rename, so the disk's write speed bounds it.
    ScratchDir scratch(agent.sandbox->dir());
    auto client = agent.connect();
    double up = upload(*client, scratch.path + "/big.bin", file_size, make_upload_content(file_size));
    double dd = command_mb_per_s("dd if=/dev/zero of='" + scratch.path + "/dd.bin' bs=1M count=" +
                                     std::to_string(file_size >> 20) + " conv=fsync status=none",
                                 file_size);
    row("fs.write " + mib + " to disk vs dd conv=fsync", up, dd, "MB/s");
  }

  agent.sandbox->signal(SIGTERM);
  agent.sandbox->wait_exit(std::chrono::seconds(10));
  return 0;
}
