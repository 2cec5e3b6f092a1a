// `gpubox result ID JOB [--out DIR] [--max-size BYTES] [--ack]`: downloads a
// finished job's staged archive (resumable, sha256-checked, size-capped) and
// extracts it with the hardened extractor (host/harvest/), then says where the
// files went. The sandbox keeps its copy until `job.ack` (--ack sends it once
// every file is extracted), so a refused or failed download can simply be run again.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <iostream>

#include "base/terminal_text.h"
#include "host/cli/cli.h"
#include "host/cli/progress.h"
#include "host/harvest/harvest_job.h"

namespace gpubox::host::cli {
namespace {

// A file name or status from the job's result as the terminal shows it: the job chose it.
std::string result_text(const nlohmann::json& value) {
  return escape_for_terminal(value.is_string() ? value.get<std::string>() : value.dump());
}

std::string mib(std::uint64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f MiB", static_cast<double>(bytes) / 1048576.0);
  return text;
}

}  // namespace

int run_result(const std::vector<std::string>& raw, const Global& global) {
  constexpr char kUsage[] =
      "usage: gpubox result ID|NAME JOB [--out DIR] [--max-size BYTES] [--ack] [--json]\n"
      "  downloads a finished job's outputs (out/) and its stdout.log/stderr.log into DIR, which must not\n"
      "  exist yet (default: ./NAME-JOB, or ./ID-JOB for a sandbox without a name). --max-size refuses an\n"
      "  archive above BYTES; the sandbox keeps it, so a later run with a larger --max-size gets it without\n"
      "  re-running the job. --ack lets the sandbox\n"
      "  delete its staged copy once everything is extracted (without it the copy stays for another download).\n";
  auto args = parse_args(raw, {"--out", "--max-size"}, {"--ack"});
  if (!args) return fail_usage("result", args.status());
  if (args->flag("--help")) return show_usage(kUsage);
  if (args->positional.size() != 2) return fail_usage("result", "expected ID JOB");
  const std::string& job = args->positional[1];
  harvest::HarvestOptions options;
  options.job_id = job;
  options.keep_archive = false;
  if (auto cap = args->last("--max-size")) {
    auto bytes = parse_number(*cap, 1, 1e18);
    if (!bytes || *bytes != static_cast<double>(static_cast<std::uint64_t>(*bytes))) {
      return fail("result", "--max-size '" + *cap + "': expected a whole number of bytes > 0", kExitUsage);
    }
    options.max_bytes = static_cast<std::uint64_t>(*bytes);
  }
  auto record = find_sandbox(args->positional[0]);
  if (!record) return fail("result", record.status(), exit_code_for(record.status()));
  options.out_dir = args->last("--out").value_or((record->name.empty() ? record->id : record->name) + "-" + job);
  std::error_code error;
  if (std::filesystem::exists(options.out_dir, error)) {
    return fail("result", "'" + options.out_dir + "' exists: give a new directory with --out", kExitUsage);
  }
  auto client = connect_sandbox(*record);
  if (!client) return fail("result", client.status(), kExitUnreachable);

  auto info = (*client)->call("job.wait", {{"job_id", job}, {"timeout_s", 0}});
  if (!info) {
    bool unknown = info.status().code() == ErrorCode::not_found || info.status().code() == ErrorCode::invalid_request;
    return fail("result", info.status().to_string(), unknown ? kExitUsage : kExitFailed);
  }
  if (info->value("state", "") != "finished") {
    return fail("result", job + " is " + info->value("state", "?") + ": `gpubox wait " + args->positional[0] + " " + job +
                              "` first", kExitFailed);
  }
  std::uint64_t size = 0;
  if (info->contains("archive") && (*info)["archive"].is_object()) size = (*info)["archive"].value("size", 0ULL);
  Progress progress(size, job);
  options.progress = [&progress](std::uint64_t done, std::uint64_t total) { progress.set(done, total); };
  auto harvested = harvest::harvest_job(**client, options);
  if (!harvested) {
    const Status& why = harvested.status();
    if (why.code() == ErrorCode::result_rejected) {
      std::string cap = std::to_string(*options.max_bytes);
      return fail("result",
                  "the result archive" + (size ? " (" + std::to_string(size) + " bytes)" : std::string()) +
                      " is larger than --max-size " + cap + "; the sandbox keeps it: run again with --max-size " +
                      (size ? std::to_string(size) : "a larger number") + " or more",
                  kExitFailed);
    }
    return fail("result", why.to_string(), why.code() == ErrorCode::not_found ? kExitUsage : kExitFailed);
  }
  const nlohmann::json& result = harvested->result;
  bool acked = false;
  if (args->flag("--ack")) {
    auto ack = (*client)->call("job.ack", {{"job_id", job}});
    if (!ack) {
      std::fprintf(stderr, "gpubox result: the files are extracted, but job.ack failed (the sandbox keeps its copy): %s\n",
                   escape_for_terminal(ack.status().to_string()).c_str());
    }
    acked = static_cast<bool>(ack);
  }
  std::string out_dir = std::filesystem::absolute(options.out_dir, error).lexically_normal().string();
  if (global.json || args->flag("--json")) {
    std::cout << nlohmann::json{{"job_id", job},
                                {"dir", out_dir},
                                {"status", result.value("status", "")},
                                {"files", harvested->extracted.files},
                                {"bytes", harvested->extracted.bytes},
                                {"archive_size", harvested->archive_size},
                                {"featured_files", result.value("featured_files", nlohmann::json::array())},
                                {"acked", acked},
                                {"result", result}}
                     .dump()
              << "\n";
    return kExitOk;
  }
  std::string dir = escape_for_terminal(out_dir);
  std::printf("%s %s: %llu file(s), %s, extracted to %s\n", escape_for_terminal(job).c_str(),
              result_text(result.value("status", nlohmann::json("?"))).c_str(),
              static_cast<unsigned long long>(harvested->extracted.files), mib(harvested->extracted.bytes).c_str(), dir.c_str());
  std::printf("logs: %s/stdout.log, %s/stderr.log\n", dir.c_str(), dir.c_str());
  if (acked) std::printf("acknowledged: the sandbox deleted its staged copy\n");
  auto featured = result.value("featured_files", nlohmann::json::array());
  if (!featured.empty()) std::printf("featured:\n");
  for (const auto& file : featured) {
    std::printf("  %s/out/%s\n", dir.c_str(), result_text(file).c_str());
  }
  for (const auto& missing : result.value("missing_files", nlohmann::json::array())) {
    std::printf("missing: %s\n", result_text(missing).c_str());
  }
  return kExitOk;
}

}  // namespace gpubox::host::cli
