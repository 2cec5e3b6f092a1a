// job.* methods (rpc/PROTOCOL.md, "Jobs"): params and streaming here; the
// jobs themselves live in agent/jobs/JobManager. Each handler runs on one
// worker thread.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <limits>
#include <thread>

#include "agent/jobs/input_upload.h"
#include "agent/jobs/job_manager.h"
#include "agent/methods/methods.h"
#include "rpc/params.h"

namespace gpubox {
namespace {

using nlohmann::json;
using jobs::JobManager;

constexpr std::size_t kJobDataChunkBytes = 1 << 20;
constexpr std::int64_t kMaxJobByteParam = std::numeric_limits<std::int64_t>::max();
constexpr std::int64_t kDefaultLogTail = 64 * 1024;
constexpr std::int64_t kMaxLogTail = 16 << 20;
constexpr auto kFollowPoll = std::chrono::milliseconds(50);

std::optional<std::string> read_job_id(rpc::ParamReader& params) { return params.string("job_id", true); }

Result<json> job_submit(rpc::CallContext& call, JobManager& manager, const AgentAccess& agent) {
  if (agent.accepting_work && !agent.accepting_work()) {
    return Status(ErrorCode::unavailable, "the agent is shutting down; no new jobs start");
  }
  auto spec = jobs::parse_job_spec(call.params());
  if (!spec) return spec.status();
  auto incoming = manager.make_incoming_dir(*spec);
  if (!incoming) return incoming.status();
  Status received = jobs::receive_inputs(call, spec->inputs, *incoming);
  if (received) {
    auto submitted = manager.submit(std::move(*spec), *incoming);
    if (submitted) return submitted;
    received = submitted.status();
  }
  std::error_code error;
  std::filesystem::remove_all(*incoming, error);
  return received;
}

// Long-poll until the job finishes or timeout_s passes; with stream, a DATA
// message per change of state first.
Result<json> job_wait(rpc::CallContext& call, JobManager& manager) {
  rpc::ParamReader params(call.params());
  auto id = read_job_id(params);
  auto timeout = params.number("timeout_s", 0, 86400);
  auto stream = params.boolean("stream");
  if (Status status = params.finish(); !status) return status;
  auto deadline = jobs::Clock::now() + std::chrono::duration_cast<jobs::Clock::duration>(
                                          std::chrono::duration<double>(timeout.value_or(30)));
  if (call.deadline() && *call.deadline() < deadline) deadline = *call.deadline();
  auto stopped = [&call] { return call.stopped(); };
  if (!stream.value_or(false)) {
    // Plain long-poll: only "finished" (or the deadline) ends it.
    auto info = manager.wait_change(*id, std::numeric_limits<std::uint64_t>::max(), deadline, stopped);
    if (info) (*info)["waited_out"] = (*info)["state"] != "finished";
    return info;
  }
  std::uint64_t seen = 0;
  while (true) {
    auto info = manager.wait_change(*id, seen, deadline, stopped);
    if (!info) return info;
    bool finished = (*info)["state"] == "finished";
    if (finished || jobs::Clock::now() >= deadline) {
      (*info)["waited_out"] = !finished;
      return info;
    }
    seen = (*info)["version"].get<std::uint64_t>();
    if (Status sent = call.send_data(*info); !sent) return sent;
  }
}

Result<json> job_list(rpc::CallContext& call, JobManager& manager) {
  rpc::ParamReader params(call.params());
  if (Status status = params.finish(); !status) return status;
  return manager.list();
}

Result<json> job_cancel(rpc::CallContext& call, JobManager& manager) {
  rpc::ParamReader params(call.params());
  auto id = read_job_id(params);
  if (Status status = params.finish(); !status) return status;
  return manager.cancel(*id);
}

Result<json> job_ack(rpc::CallContext& call, JobManager& manager) {
  rpc::ParamReader params(call.params());
  auto id = read_job_id(params);
  if (Status status = params.finish(); !status) return status;
  return manager.ack(*id);
}

// A malloc'd chunk handed to ZeroMQ without a copy.
Result<zmq::message_t> read_chunk(int fd, std::uint64_t offset, std::size_t size, const std::string& what) {
  char* buffer = static_cast<char*>(std::malloc(size ? size : 1));
  if (!buffer) return Status(ErrorCode::resource_exhausted, "out of memory for a read buffer");
  std::size_t got = 0;
  while (got < size) {
    ssize_t n = ::pread(fd, buffer + got, size - got, static_cast<off_t>(offset + got));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      std::free(buffer);
      return n < 0 ? Status::from_errno(errno, "cannot read " + what)
                   : Status(ErrorCode::internal, what + " is shorter than its manifest says");
    }
    got += static_cast<std::size_t>(n);
  }
  return zmq::message_t(buffer, size, [](void* bytes, void*) { std::free(bytes); }, nullptr);
}

Result<json> job_download(rpc::CallContext& call, JobManager& manager) {
  rpc::ParamReader params(call.params());
  auto id = read_job_id(params);
  auto offset = params.integer("offset", 0, kMaxJobByteParam);
  auto max_bytes = params.integer("max_bytes", 0, kMaxJobByteParam);
  if (Status status = params.finish(); !status) return status;
  auto archive = manager.staged_archive(*id);
  if (!archive) return archive.status();
  if (max_bytes && archive->size > static_cast<std::uint64_t>(*max_bytes)) {
    return Status(ErrorCode::result_rejected, "the archive of " + *id + " is " + std::to_string(archive->size) +
                                                  " bytes, above params.max_bytes " + std::to_string(*max_bytes) +
                                                  "; the staged copy is kept: download again with a larger max_bytes");
  }
  std::uint64_t start = static_cast<std::uint64_t>(offset.value_or(0));
  if (start > archive->size) {
    return Status(ErrorCode::invalid_request, "params.offset: " + std::to_string(start) + " is past the archive's end (" +
                                                  std::to_string(archive->size) + " bytes)");
  }
  Fd fd(::open(archive->path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return Status::from_errno(errno, "cannot open the staged archive of " + *id);
  ::posix_fadvise(fd.get(), static_cast<off_t>(start), 0, POSIX_FADV_SEQUENTIAL);
  std::uint64_t position = start;
  while (position < archive->size) {
    std::size_t size = static_cast<std::size_t>(std::min<std::uint64_t>(kJobDataChunkBytes, archive->size - position));
    auto chunk = read_chunk(fd.get(), position, size, "the staged archive of " + *id);
    if (!chunk) return chunk.status();
    std::vector<zmq::message_t> attachments;
    attachments.push_back(std::move(*chunk));
    if (Status sent = call.send_data(json{{"offset", position}}, std::move(attachments)); !sent) return sent;
    position += size;
  }
  return json{{"job_id", *id},
              {"size", archive->size},
              {"sha256", archive->sha256},
              {"offset", start},
              {"sent", archive->size - start},
              {"manifest", archive->manifest}};
}

Result<json> job_logs(rpc::CallContext& call, JobManager& manager) {
  rpc::ParamReader params(call.params());
  auto id = read_job_id(params);
  auto stream = params.string("stream");
  auto tail = params.integer("tail_bytes", 0, kMaxLogTail);
  auto offset = params.integer("offset", 0, kMaxJobByteParam);
  auto follow = params.boolean("follow");
  if (Status status = params.finish(); !status) return status;
  auto log = manager.log_file(*id, stream.value_or("stdout"));
  if (!log) return log.status();
  Fd fd(::open(log->first.c_str(), O_RDONLY | O_CLOEXEC));
  auto file_size = [&]() -> std::uint64_t {
    struct stat st;
    return fd.valid() && ::fstat(fd.get(), &st) == 0 ? static_cast<std::uint64_t>(st.st_size) : 0;
  };
  std::uint64_t size = file_size();
  std::uint64_t position = offset ? std::min<std::uint64_t>(static_cast<std::uint64_t>(*offset), size)
                                  : size - std::min<std::uint64_t>(size, static_cast<std::uint64_t>(tail.value_or(kDefaultLogTail)));
  if (!follow.value_or(false)) {
    std::size_t length = static_cast<std::size_t>(std::min<std::uint64_t>(size - position, kMaxLogTail));
    std::string data;
    if (length > 0) {
      auto chunk = read_chunk(fd.get(), position, length, log->first);
      if (!chunk) return chunk.status();
      data.assign(static_cast<const char*>(chunk->data()), chunk->size());
    }
    return json{{"data", rpc::binary(data)}, {"offset", position}, {"size", size}};
  }
  // Follow: send what there is, then what is appended, until the job can no longer write.
  while (true) {
    if (!fd.valid()) fd.reset(::open(log->first.c_str(), O_RDONLY | O_CLOEXEC));
    size = file_size();
    while (position < size) {
      std::size_t length = static_cast<std::size_t>(std::min<std::uint64_t>(kJobDataChunkBytes, size - position));
      auto chunk = read_chunk(fd.get(), position, length, log->first);
      if (!chunk) return chunk.status();
      std::vector<zmq::message_t> attachments;
      attachments.push_back(std::move(*chunk));
      if (Status sent = call.send_data(json{{"offset", position}}, std::move(attachments)); !sent) return sent;
      position += length;
    }
    auto again = manager.log_file(*id, stream.value_or("stdout"));
    if (!again) return again.status();
    if (!again->second && file_size() == position) break;
    if (call.wait_stopped(kFollowPoll)) return call.stop_reason();
  }
  return json{{"offset", position}, {"size", position}};
}

}  // namespace

void add_job_methods(rpc::MethodRegistry& methods, jobs::JobManager& manager, const AgentAccess& agent) {
  methods.add("job.submit", [&manager, agent](rpc::CallContext& call) { return job_submit(call, manager, agent); });
  methods.add("job.wait", [&manager](rpc::CallContext& call) { return job_wait(call, manager); });
  methods.add("job.list", [&manager](rpc::CallContext& call) { return job_list(call, manager); });
  methods.add("job.cancel", [&manager](rpc::CallContext& call) { return job_cancel(call, manager); });
  methods.add("job.ack", [&manager](rpc::CallContext& call) { return job_ack(call, manager); });
  methods.add("job.download", [&manager](rpc::CallContext& call) { return job_download(call, manager); });
  methods.add("job.logs", [&manager](rpc::CallContext& call) { return job_logs(call, manager); });
}

}  // namespace gpubox
