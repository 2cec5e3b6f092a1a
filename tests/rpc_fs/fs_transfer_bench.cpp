// fs.write / fs.read throughput over the real agent's ipc:// endpoint, next
// to the figures that bound it on this machine: libsodium's SHA-256 (each
// transfer hashes every byte once) and a plain local copy through the page
// cache. Usage: gpubox_bench_fs_transfer [MiB] (default 1024).
#include <fcntl.h>
#include <sodium.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "rpc/client.h"
#include "tests/support/agent_rpc.h"

namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;
constexpr std::size_t kMiB = 1 << 20;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

std::string hex(const unsigned char* digest) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (std::size_t i = 0; i < crypto_hash_sha256_BYTES; ++i) {
    out.push_back(kHex[digest[i] >> 4]);
    out.push_back(kHex[digest[i] & 15]);
  }
  return out;
}

// User + system CPU seconds the process has used so far.
double cpu_seconds(pid_t pid) {
  std::FILE* file = std::fopen(("/proc/" + std::to_string(pid) + "/stat").c_str(), "r");
  if (!file) return 0;
  char line[1024] = {};
  std::size_t n = std::fread(line, 1, sizeof line - 1, file);
  std::fclose(file);
  line[n] = '\0';
  const char* rest = std::strrchr(line, ')');
  unsigned long utime = 0, stime = 0;
  if (!rest || std::sscanf(rest + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &utime, &stime) != 2) return 0;
  return static_cast<double>(utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

int fail(const std::string& what) {
  std::fprintf(stderr, "bench failed: %s\n", what.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  using gpubox::rpc::Client;
  std::size_t total_mib = argc > 1 ? static_cast<std::size_t>(std::atol(argv[1])) : 1024;
  if (total_mib == 0 || sodium_init() < 0) return fail("usage: gpubox_bench_fs_transfer [MiB]");
  std::string tmpl = (std::filesystem::temp_directory_path() / "gpubox-fs-bench-XXXXXX").string();
  if (!::mkdtemp(tmpl.data())) return fail("mkdtemp");
  std::string dir = tmpl;
  std::string target = dir + "/payload";

  // The upload repeats one 64 MiB block; its digest is computed here first,
  // which is also the SHA-256 bound.
  std::vector<char> block(64 * kMiB);
  for (std::size_t i = 0; i < block.size(); ++i) block[i] = static_cast<char>((i * 2654435761u) >> 13);
  std::size_t blocks = (total_mib + 63) / 64;
  std::size_t total = blocks * block.size();
  crypto_hash_sha256_state state;
  crypto_hash_sha256_init(&state);
  auto started = Clock::now();
  for (std::size_t i = 0; i < blocks; ++i) {
    crypto_hash_sha256_update(&state, reinterpret_cast<unsigned char*>(block.data()), block.size());
  }
  unsigned char digest[crypto_hash_sha256_BYTES];
  crypto_hash_sha256_final(&state, digest);
  double hash_mbs = static_cast<double>(total) / kMiB / seconds_since(started);
  std::string expected = hex(digest);

  std::string error;
  gpubox::testing::AgentOptions options;
  options.new_pid_namespace = false;
  options.state_dir = dir + "/state";
  options.flags = {"--log-level", "warn"};
  auto agent = gpubox::testing::AgentProcess::start_ready(options, &error);
  if (!agent) return fail(error);
  auto client = gpubox::testing::connect_ipc(*agent);
  if (!client) return fail(client.status().to_string());

  double cpu_before = cpu_seconds(agent->pid());
  started = Clock::now();
  auto upload = (*client)->stream("fs.write", {{"path", target}, {"sha256", expected}, {"size", total}});
  if (!upload) return fail(upload.status().to_string());
  for (std::size_t i = 0; i < blocks; ++i) {
    for (std::size_t at = 0; at < block.size(); at += kMiB) {
      std::vector<zmq::message_t> chunk;
      chunk.emplace_back(block.data() + at, kMiB);
      if (auto sent = (*upload)->send(json::object(), std::move(chunk)); !sent) return fail(sent.to_string());
    }
  }
  if (auto sent = (*upload)->send({{"eof", true}}); !sent) return fail(sent.to_string());
  while (!(*upload)->ended()) (void)(*upload)->next();
  if (!(*upload)->result()) return fail((*upload)->result().status().to_string());
  double write_mbs = static_cast<double>(total) / kMiB / seconds_since(started);
  double write_cpu = cpu_seconds(agent->pid()) - cpu_before;
  cpu_before = cpu_seconds(agent->pid());

  started = Clock::now();
  gpubox::rpc::CallOptions read_options;
  read_options.window = 16;
  auto download = (*client)->stream("fs.read", {{"path", target}}, read_options);
  if (!download) return fail(download.status().to_string());
  std::size_t received = 0;
  while (true) {
    auto next = (*download)->next();
    if (!next) return fail(next.status().to_string());
    if (!next->has_value()) break;
    for (auto& attachment : (**next).attachments) received += attachment.size();
  }
  if (!(*download)->result()) return fail((*download)->result().status().to_string());
  double read_mbs = static_cast<double>(total) / kMiB / seconds_since(started);
  double read_cpu = cpu_seconds(agent->pid()) - cpu_before;
  if (received != total || (*download)->result().value()["sha256"] != expected) return fail("read back other bytes");

  // A local copy of the same file through the page cache, for scale.
  started = Clock::now();
  {
    int in = ::open(target.c_str(), O_RDONLY);
    int out = ::open((target + ".copy").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    std::vector<char> buffer(kMiB);
    ssize_t n;
    while ((n = ::read(in, buffer.data(), buffer.size())) > 0) {
      if (::write(out, buffer.data(), static_cast<std::size_t>(n)) != n) break;
    }
    ::fsync(out);
    ::close(in);
    ::close(out);
  }
  double copy_mbs = static_cast<double>(total) / kMiB / seconds_since(started);

  agent->stop();
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
  std::printf("%zu MiB  libsodium sha256 %.0f MiB/s  local copy+fsync %.0f MiB/s\n", total / kMiB, hash_mbs, copy_mbs);
  std::printf("fs.write streamed %.0f MiB/s (%.2f of sha256)  fs.read streamed %.0f MiB/s (%.2f of sha256)\n", write_mbs,
              write_mbs / hash_mbs, read_mbs, read_mbs / hash_mbs);
  double gib = static_cast<double>(total) / (1024.0 * kMiB);
  std::printf("agent CPU per GiB: fs.write %.2f s, fs.read %.2f s (sha256 alone: %.2f s at the rate above)\n",
              write_cpu / gib, read_cpu / gib, 1024.0 / hash_mbs);
  return 0;
}
