#include "host/harvest/harvest_job.h"

#include <unistd.h>

#include "host/harvest/archive_download.h"

namespace gpubox::harvest {

Result<HarvestReport> harvest_job(rpc::Client& client, const HarvestOptions& options) {
  if (::access(options.out_dir.c_str(), F_OK) == 0) {
    return Status(ErrorCode::already_exists, options.out_dir + " exists: harvest into a new directory");
  }
  auto info = client.call("job.wait", {{"job_id", options.job_id}, {"timeout_s", 0}});
  if (!info) return info.status();
  if ((*info)["state"] != "finished") {
    return Status(ErrorCode::busy, "job " + options.job_id + " is " + (*info)["state"].get<std::string>() +
                                       "; wait for it first (job.wait)");
  }
  DownloadOptions download;
  download.job_id = options.job_id;
  download.destination = options.out_dir + ".tar.zst";
  download.max_bytes = options.max_bytes;
  download.progress = options.progress;
  auto downloaded = download_job_archive(client, download);
  if (!downloaded) return downloaded.status();
  auto extracted = extract_archive(download.destination, options.out_dir, options.limits);
  if (!extracted) return extracted.status();
  if (Status verified = verify_manifest(options.out_dir, downloaded->manifest); !verified) return verified;
  HarvestReport report;
  report.result = info->value("result", nlohmann::json::object());
  report.manifest = downloaded->manifest;
  report.archive_size = downloaded->size;
  report.resumed_from = downloaded->resumed_from;
  report.extracted = *extracted;
  if (options.keep_archive) {
    report.archive_path = download.destination;
  } else {
    ::unlink(download.destination.c_str());
  }
  return report;
}

}  // namespace gpubox::harvest
