// Jobs benchmark, one run (a program, not a test):
//   1. staging a mixed out/ tree (default 1 GiB: random, text-like, zeros and
//      many small files) with the agent's stager, beside `tar -I zstd -cf` and
//      `tar czf` of the same tree, with the ratios;
//   2. downloading a staged archive from the real agent (PID 1, ipc://) to the
//      host with the harvest library (sha256-checked), in MB/s;
//   3. submit → start latency over real RPC (client clock before job.submit to
//      the agent's started_at), p50 and p90.
//   gpubox_bench_jobs [SIZE_MIB] [DOWNLOAD_MIB] [SUBMITS] [ZSTD_THREADS]
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "base/stager.h"
#include "tests/bench/percentile.h"
#include "tests/bench/thread_cpu.h"
#include "tests/jobs/jobs_sandbox.h"

using namespace gpubox;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// A tree of about mib MiB: 25 % random, 40 % text-like, 10 % zeros, 25 % small files.
void make_tree(const std::string& out, std::size_t mib) {
  std::filesystem::create_directories(out + "/small");
  std::mt19937_64 random(7);
  const std::size_t chunk = 16 << 20;
  auto fill = [&](const std::string& name, std::size_t bytes, int kind) {
    std::ofstream file(out + "/" + name, std::ios::binary);
    std::string block(std::min(bytes, chunk), '\0');
    static const char* words[] = {"layer", "attention", "residual", "probe", "loss=", "0.1234", "step", "\n", "token", "mlp"};
    for (std::size_t done = 0; done < bytes; done += block.size()) {
      block.resize(std::min(chunk, bytes - done));
      if (kind == 0) {
        for (std::size_t i = 0; i + 8 <= block.size(); i += 8) {
          std::uint64_t word = random();
          std::memcpy(&block[i], &word, 8);
        }
      } else if (kind == 1) {
        std::size_t i = 0;
        while (i < block.size()) {
          const char* word = words[random() % 10];
          for (const char* c = word; *c && i < block.size(); ++c) block[i++] = *c;
          if (i < block.size()) block[i++] = ' ';
        }
      } else {
        std::fill(block.begin(), block.end(), '\0');
      }
      file.write(block.data(), static_cast<std::streamsize>(block.size()));
    }
  };
  std::size_t total = mib << 20;
  fill("random.bin", total / 4, 0);
  fill("log.txt", total * 2 / 5, 1);
  fill("zeros.bin", total / 10, 2);
  std::size_t small = 64 << 10;
  for (std::size_t i = 0; i < total / 4 / small; ++i) fill("small/f" + std::to_string(i) + ".txt", small, i % 2 ? 1 : 0);
}

// CPU seconds (user + system) used so far by this process's threads, or by its waited-for children.
double cpu_seconds(int who) {
  rusage usage{};
  ::getrusage(who, &usage);
  auto seconds = [](const timeval& t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

double run_shell(const std::string& command) {
  auto start = Clock::now();
  if (std::system(command.c_str()) != 0) std::fprintf(stderr, "bench: '%s' failed\n", command.c_str());
  return seconds_since(start);
}

std::uint64_t file_size(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 ? static_cast<std::uint64_t>(st.st_size) : 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t mib = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 1024;
  std::size_t download_mib = argc > 2 ? std::strtoul(argv[2], nullptr, 10) : 512;
  int submits = argc > 3 ? std::atoi(argv[3]) : 50;
  int threads = argc > 4 ? std::atoi(argv[4]) : 0;  // zstd workers; 0: the agent's default
  std::string dir = gpubox::testing::make_temp_dir("gpubox-bench-jobs");

  // 1. Staging.
  std::printf("== staging %zu MiB of mixed files (%u CPUs)\n", mib, std::thread::hardware_concurrency());
  make_tree(dir + "/out", mib);
  ::sync();
  jobs::StageRequest request;
  request.out_dir = dir + "/out";
  request.stdout_log = dir + "/none";
  request.stderr_log = dir + "/none";
  request.archive_path = dir + "/staged.tar.zst";
  request.compression_threads = threads;
  double cpu_before = cpu_seconds(RUSAGE_SELF);
  auto start = Clock::now();
  jobs::StageOutcome outcome = jobs::stage_outputs(request);
  double ours = seconds_since(start);
  double ours_cpu = cpu_seconds(RUSAGE_SELF) - cpu_before;
  if (!outcome.summary.archive_written) std::fprintf(stderr, "bench: staging failed: %s\n", outcome.summary.error.c_str());
  cpu_before = cpu_seconds(RUSAGE_CHILDREN);
  double tar_zstd = run_shell("cd " + dir + " && tar -I zstd -cf tar.tar.zst out");
  double tar_zstd_cpu = cpu_seconds(RUSAGE_CHILDREN) - cpu_before;
  cpu_before = cpu_seconds(RUSAGE_CHILDREN);
  double tar_gz = run_shell("cd " + dir + " && tar czf tar.tar.gz out");
  double tar_gz_cpu = cpu_seconds(RUSAGE_CHILDREN) - cpu_before;
  double mb = static_cast<double>(mib << 20) / 1e6;
  std::printf("gpubox stager (tar+zstd, sha256 per file and of the archive, fsync): %.2f s  %.0f MB/s  cpu %.2f s  archive %.0f MB\n",
              ours, mb / ours, ours_cpu, static_cast<double>(file_size(request.archive_path)) / 1e6);
  std::printf("tar -I zstd -cf:                                                     %.2f s  %.0f MB/s  cpu %.2f s  archive %.0f MB\n",
              tar_zstd, mb / tar_zstd, tar_zstd_cpu, static_cast<double>(file_size(dir + "/tar.tar.zst")) / 1e6);
  std::printf("tar czf:                                                             %.2f s  %.0f MB/s  cpu %.2f s  archive %.0f MB\n",
              tar_gz, mb / tar_gz, tar_gz_cpu, static_cast<double>(file_size(dir + "/tar.tar.gz")) / 1e6);
  std::printf("ratio: %.2fx tar -I zstd, %.2fx tar czf (target: >= 1x and >= 3x)\n", tar_zstd / ours, tar_gz / ours);
  std::filesystem::remove_all(dir + "/out");

  // 2. Download to the host.
  std::printf("== download of a %zu MiB staged archive over ipc://\n", download_mib);
  auto sandbox = gpubox::testing::JobsSandbox::start({{"jobs", {{"compression_level", 1}}}});
  if (!sandbox) return 1;
  auto job = sandbox->call("job.submit", {{"command", "head -c " + std::to_string(download_mib << 20) + " /dev/urandom > out/r.bin"}});
  if (!job) return 1;
  std::string id = (*job)["job_id"];
  auto waited = sandbox->call("job.wait", {{"job_id", id}, {"timeout_s", 600}});
  if (!waited) return 1;
  harvest::DownloadOptions options;
  options.job_id = id;
  // To tmpfs when there is one, so the figure is the transfer's, not the host disk's.
  std::string landing = std::filesystem::exists("/dev/shm") ? "/dev/shm" : dir;
  options.destination = landing + "/gpubox-bench-downloaded.tar.zst";
  if (const char* window = std::getenv("GPUBOX_BENCH_WINDOW")) options.window = std::strtoul(window, nullptr, 10);
  using gpubox::bench::ThreadCpu;
  ThreadCpu bench_before = ThreadCpu::of(::getpid()), agent_before = ThreadCpu::of(sandbox->box().pid());
  start = Clock::now();
  auto downloaded = harvest::download_job_archive(sandbox->client(), options);
  double took = seconds_since(start);
  ThreadCpu bench_after = ThreadCpu::of(::getpid()), agent_after = ThreadCpu::of(sandbox->box().pid());
  if (!downloaded) {
    std::fprintf(stderr, "bench: download failed: %s\n", downloaded.status().to_string().c_str());
    return 1;
  }
  std::printf("download (1 MiB chunks, window %llu, sha256 on the host, written to %s): %.2f s  %.0f MB/s (target >= 500)\n",
              static_cast<unsigned long long>(options.window), landing.c_str(), took,
              static_cast<double>(downloaded->size) / 1e6 / took);
  double gib = static_cast<double>(downloaded->size) / (1u << 30);
  std::printf("  CPU s per GiB, by thread: host %s, agent %s\n", ThreadCpu::used(bench_before, bench_after, gib).c_str(),
              ThreadCpu::used(agent_before, agent_after, gib).c_str());
  std::filesystem::remove(options.destination);

  // 3. Submit → start latency.
  std::printf("== submit -> start latency, %d jobs one after another\n", submits);
  std::vector<double> latencies;
  for (int i = 0; i < submits; ++i) {
    double before = unix_now();
    auto submitted = sandbox->call("job.submit", {{"command", "true"}});
    if (!submitted) return 1;
    auto done = sandbox->call("job.wait", {{"job_id", (*submitted)["job_id"]}, {"timeout_s", 30}});
    if (!done || !done->contains("started_at")) return 1;
    latencies.push_back(((*done)["started_at"].get<double>() - before) * 1000.0);
    (void)sandbox->call("job.ack", {{"job_id", (*submitted)["job_id"]}});
  }
  double p50 = gpubox::bench::percentile(latencies, 0.5);
  double p90 = gpubox::bench::percentile(latencies, 0.9);
  std::printf("submit -> start: p50 %.2f ms  p90 %.2f ms (target p50 <= 5 ms)\n", p50, p90);
  std::filesystem::remove_all(dir);
  return 0;
}
