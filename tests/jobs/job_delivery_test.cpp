// Delivery, journal and watchdogs against the real agent as PID 1: inputs
// verified before anything starts, size-capped and resumable downloads,
// job.wait/job.logs streams, job.ack, lost jobs after a restart in place, the
// idle watchdog and the owner lease with their persistent copies.
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <random>

#include "host/harvest/harvest_job.h"
#include "rpc/params.h"
#include "tests/jobs/jobs_sandbox.h"

namespace gpubox::testing {
namespace {

using nlohmann::json;

std::string random_bytes(std::size_t size, unsigned seed) {
  std::mt19937_64 generator(seed);
  std::string bytes(size, '\0');
  for (auto& c : bytes) c = static_cast<char>(generator());
  return bytes;
}

zmq::message_t message_of(const std::string& bytes) { return zmq::message_t(bytes.data(), bytes.size()); }

TEST(JobDelivery, InputsAreVerifiedBeforeTheJobStarts) {
  auto sandbox = JobsSandbox::start();
  ASSERT_TRUE(sandbox);
  std::string data = random_bytes(100'000, 1);
  std::vector<zmq::message_t> attachments;
  attachments.push_back(message_of(data));
  rpc::CallOptions options;
  options.attachments = &attachments;
  auto good = sandbox->client().call("job.submit",
                                     {{"command", "sha256sum data.bin | cut -c1-64 > out/sum; cp data.bin out/copy.bin"},
                                      {"inputs", {{{"name", "data.bin"}, {"sha256", sha256_hex(data)}, {"size", data.size()}}}}},
                                     std::move(options));
  ASSERT_TRUE(good) << good.status().to_string();
  std::string id = (*good)["job_id"];
  EXPECT_EQ(sandbox->wait_finished(id)["result"]["status"], "succeeded");
  Harvest harvest = sandbox->harvest(id);
  EXPECT_EQ(harvest.files["out/copy.bin"], data);
  EXPECT_EQ(harvest.files["out/sum"], sha256_hex(data) + "\n");
}

TEST(JobDelivery, AStreamedInputThatDoesNotMatchIsInputChangedAndNothingStarts) {
  auto sandbox = JobsSandbox::start();
  ASSERT_TRUE(sandbox);
  std::string declared = random_bytes(3 << 20, 2);
  std::string sent = declared;
  sent[sent.size() / 2] ^= 1;
  json params = {{"command", "touch /tmp/gpubox-should-never-run"},
                 {"inputs", {{{"name", "weights.bin"}, {"sha256", sha256_hex(declared)}, {"size", declared.size()}}}}};
  auto opened = sandbox->client().stream("job.submit", params);
  ASSERT_TRUE(opened);
  rpc::Stream& stream = **opened;
  for (std::size_t at = 0; at < sent.size(); at += 1 << 20) {
    std::vector<zmq::message_t> chunk;
    chunk.push_back(message_of(sent.substr(at, 1 << 20)));
    ASSERT_TRUE(stream.send({{"name", "weights.bin"}}, std::move(chunk)).is_ok());
  }
  ASSERT_TRUE(stream.send({{"eof", true}}).is_ok());
  while (!stream.ended()) ASSERT_TRUE(stream.next());
  ASSERT_FALSE(stream.result());
  EXPECT_EQ(stream.result().status().code(), ErrorCode::input_changed);
  EXPECT_NE(stream.result().status().message().find("input weights.bin"), std::string::npos);
  auto list = sandbox->call("job.list", json::object());
  ASSERT_TRUE(list);
  EXPECT_TRUE((*list)["jobs"].empty()) << "nothing was accepted";
  int entries = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator(sandbox->state_dir() + "/jobs")) ++entries;
  EXPECT_EQ(entries, 0) << "no work dir left behind";

  // Inputs above jobs.max_input_bytes are refused before any byte is sent.
  auto huge = sandbox->call("job.submit", {{"command", "true"}, {"inputs", {{{"name", "x"}, {"sha256", sha256_hex("")}, {"size", 1LL << 40}}}}});
  ASSERT_FALSE(huge);
  EXPECT_EQ(huge.status().code(), ErrorCode::resource_exhausted);
  EXPECT_NE(huge.status().message().find("jobs.max_input_bytes"), std::string::npos);

  // A path as an input name is refused before any byte is sent.
  auto path = sandbox->call("job.submit", {{"command", "true"}, {"inputs", {{{"name", "../x"}, {"sha256", sha256_hex("")}, {"size", 0}}}}});
  ASSERT_FALSE(path);
  EXPECT_EQ(path.status().code(), ErrorCode::invalid_request);
  EXPECT_NE(path.status().message().find("params.inputs[0].name"), std::string::npos);
}

TEST(JobDelivery, AnOversizedResultIsRejectedKeptAndDownloadedUnderARaisedCap) {
  auto sandbox = JobsSandbox::start();
  ASSERT_TRUE(sandbox);
  std::string id = sandbox->submit({{"command", "head -c 3000000 /dev/urandom > out/big.bin"}})["job_id"];
  json info = sandbox->wait_finished(id);
  std::uint64_t size = info["archive"]["size"];
  EXPECT_GT(size, 3'000'000u);
  harvest::DownloadOptions options;
  options.job_id = id;
  options.destination = sandbox->box().path("capped.tar.zst");
  options.max_bytes = 1'000'000;
  auto rejected = harvest::download_job_archive(sandbox->client(), options);
  ASSERT_FALSE(rejected);
  EXPECT_EQ(rejected.status().code(), ErrorCode::result_rejected);
  EXPECT_NE(rejected.status().message().find("staged copy is kept"), std::string::npos);
  EXPECT_FALSE(file_exists(options.destination + ".partial")) << "no empty partial file left behind";
  Harvest harvest = sandbox->harvest(id, size);
  EXPECT_EQ(harvest.files["out/big.bin"].size(), 3'000'000u);
  auto list = sandbox->call("job.list", json::object());
  EXPECT_EQ((*list)["jobs"].size(), 1u) << "nothing was re-run";
}

TEST(JobDelivery, ADownloadResumesFromWhatAnInterruptedOneLeft) {
  auto sandbox = JobsSandbox::start();
  ASSERT_TRUE(sandbox);
  std::string id = sandbox->submit({{"command", "head -c 5000000 /dev/urandom > out/r.bin"}})["job_id"];
  sandbox->wait_finished(id);
  std::string archive = read_file(sandbox->state_dir() + "/staged/" + id + "/archive.tar.zst");
  harvest::DownloadOptions options;
  options.job_id = id;
  options.destination = sandbox->box().path("resumed.tar.zst");
  write_file(options.destination + ".partial", archive.substr(0, 2'500'000));
  std::vector<std::uint64_t> progress;
  options.progress = [&](std::uint64_t done, std::uint64_t) { progress.push_back(done); };
  auto resumed = harvest::download_job_archive(sandbox->client(), options);
  ASSERT_TRUE(resumed) << resumed.status().to_string();
  EXPECT_EQ(resumed->resumed_from, 2'500'000u);
  ASSERT_FALSE(progress.empty());
  EXPECT_GT(progress.front(), 2'500'000u) << "the first chunk continued where the partial file ended";
  EXPECT_EQ(read_file(options.destination), archive);

  // A corrupt partial file is caught by the sha256 and removed.
  options.destination = sandbox->box().path("corrupt.tar.zst");
  std::string bad = archive.substr(0, 1'000'000);
  bad[10] ^= 1;
  write_file(options.destination + ".partial", bad);
  auto corrupt = harvest::download_job_archive(sandbox->client(), options);
  ASSERT_FALSE(corrupt);
  EXPECT_EQ(corrupt.status().code(), ErrorCode::input_changed);
  EXPECT_FALSE(file_exists(options.destination + ".partial"));
  EXPECT_TRUE(harvest::download_job_archive(sandbox->client(), options)) << "a retry starts afresh";
}

TEST(JobDelivery, HarvestJobDownloadsExtractsAndVerifiesInOneCall) {
  auto sandbox = JobsSandbox::start();
  ASSERT_TRUE(sandbox);
  std::string id = sandbox->submit({{"command", "mkdir -p out/d; echo deep > out/d/f.txt; head -c 2000000 /dev/urandom > out/r.bin"}})["job_id"];
  std::string running = sandbox->submit({{"command", "sleep 30"}})["job_id"];
  sandbox->wait_finished(id);
  harvest::HarvestOptions options;
  options.job_id = id;
  options.out_dir = sandbox->box().path("result-" + id);
  auto report = harvest::harvest_job(sandbox->client(), options);
  ASSERT_TRUE(report) << report.status().to_string();
  EXPECT_EQ(report->result["status"], "succeeded");
  EXPECT_EQ(read_file(options.out_dir + "/out/d/f.txt"), "deep\n");
  EXPECT_EQ(read_file(options.out_dir + "/out/r.bin").size(), 2'000'000u);
  EXPECT_EQ(report->extracted.files, 4u) << "two outputs and two logs";
  EXPECT_TRUE(file_exists(report->archive_path));
  EXPECT_EQ(report->archive_size, report->manifest["archive"]["size"].get<std::uint64_t>());

  auto again = harvest::harvest_job(sandbox->client(), options);
  ASSERT_FALSE(again);
  EXPECT_EQ(again.status().code(), ErrorCode::already_exists);
  options.job_id = running;
  options.out_dir = sandbox->box().path("result-running");
  auto busy = harvest::harvest_job(sandbox->client(), options);
  ASSERT_FALSE(busy);
  EXPECT_EQ(busy.status().code(), ErrorCode::busy);
  ASSERT_TRUE(sandbox->call("job.cancel", {{"job_id", running}}));
  sandbox->wait_finished(running);
}

TEST(JobDelivery, AckDeletesTheStagedCopyButKeepsTheRecord) {
  auto sandbox = JobsSandbox::start();
  ASSERT_TRUE(sandbox);
  std::string id = sandbox->submit({{"command", "echo x > out/x"}})["job_id"];
  sandbox->wait_finished(id);
  auto early = sandbox->call("job.ack", {{"job_id", "job-404"}});
  EXPECT_EQ(early.status().code(), ErrorCode::not_found);
  auto acked = sandbox->call("job.ack", {{"job_id", id}});
  ASSERT_TRUE(acked);
  EXPECT_EQ((*acked)["acked"], true);
  EXPECT_FALSE(file_exists(sandbox->state_dir() + "/staged/" + id));
  EXPECT_FALSE(file_exists(sandbox->state_dir() + "/jobs/" + id));
  auto download = sandbox->call("job.download", {{"job_id", id}});
  ASSERT_FALSE(download);
  EXPECT_EQ(download.status().code(), ErrorCode::not_found);
  EXPECT_NE(download.status().message().find("job.ack"), std::string::npos);
  auto info = sandbox->call("job.wait", {{"job_id", id}, {"timeout_s", 0}});
  EXPECT_EQ((*info)["result"]["status"], "succeeded");
}

TEST(JobDelivery, DownloadOfARunningJobIsBusy) {
  auto sandbox = JobsSandbox::start();
  ASSERT_TRUE(sandbox);
  std::string id = sandbox->submit({{"command", "sleep 30"}})["job_id"];
  auto busy = sandbox->call("job.download", {{"job_id", id}});
  ASSERT_FALSE(busy);
  EXPECT_EQ(busy.status().code(), ErrorCode::busy);
  ASSERT_TRUE(sandbox->call("job.cancel", {{"job_id", id}}));
  sandbox->wait_finished(id);
}

TEST(JobDelivery, WaitStreamsEachStateAndJobsRunOneAtATimeInOrder) {
  auto sandbox = JobsSandbox::start();
  ASSERT_TRUE(sandbox);
  std::string first = sandbox->submit({{"command", "sleep 0.3"}})["job_id"];
  std::string second = sandbox->submit({{"command", "true"}})["job_id"];
  auto opened = sandbox->client().stream("job.wait", {{"job_id", second}, {"stream", true}, {"timeout_s", 20}});
  ASSERT_TRUE(opened);
  std::vector<std::string> states;
  while (true) {
    auto next = (*opened)->next();
    ASSERT_TRUE(next);
    if (!next->has_value()) break;
    states.push_back((**next).body["state"]);
  }
  ASSERT_TRUE((*opened)->result());
  json final = (*opened)->result().value();
  EXPECT_EQ(final["state"], "finished");
  ASSERT_FALSE(states.empty());
  EXPECT_EQ(states.front(), "queued");
  json earlier = sandbox->wait_finished(first);
  EXPECT_GE(final["started_at"].get<double>(), earlier["ended_at"].get<double>()) << "FIFO with max_concurrent 1";
}

TEST(JobDelivery, LogsTailAndFollow) {
  auto sandbox = JobsSandbox::start();
  ASSERT_TRUE(sandbox);
  std::string id = sandbox->submit({{"command", "for i in 1 2 3 4 5; do echo line$i; sleep 0.1; done; echo e >&2"}})["job_id"];
  auto opened = sandbox->client().stream("job.logs", {{"job_id", id}, {"follow", true}, {"offset", 0}});
  ASSERT_TRUE(opened);
  std::string followed;
  while (true) {
    auto next = (*opened)->next();
    ASSERT_TRUE(next);
    if (!next->has_value()) break;
    for (const auto& a : (**next).attachments) followed.append(static_cast<const char*>(a.data()), a.size());
  }
  ASSERT_TRUE((*opened)->result()) << (*opened)->result().status().to_string();
  EXPECT_EQ(followed, "line1\nline2\nline3\nline4\nline5\n");
  auto tail = sandbox->call("job.logs", {{"job_id", id}, {"tail_bytes", 6}});
  ASSERT_TRUE(tail);
  auto bytes = (*tail)["data"].get_binary();
  EXPECT_EQ(std::string(bytes.begin(), bytes.end()), "line5\n");
  auto err = sandbox->call("job.logs", {{"job_id", id}, {"stream", "stderr"}});
  auto err_bytes = (*err)["data"].get_binary();
  EXPECT_EQ(std::string(err_bytes.begin(), err_bytes.end()), "e\n");
  auto bad = sandbox->call("job.logs", {{"job_id", id}, {"stream", "stdin"}});
  EXPECT_EQ(bad.status().code(), ErrorCode::invalid_request);
}

TEST(JobDelivery, AHostThatReconnectsSeesEveryJobAndReattaches) {
  auto sandbox = JobsSandbox::start();
  ASSERT_TRUE(sandbox);
  std::string done = sandbox->submit({{"command", "echo a > out/a"}})["job_id"];
  sandbox->wait_finished(done);
  std::string running = sandbox->submit({{"command", "echo b > out/b; sleep 0.5; echo more"}})["job_id"];
  std::string endpoint = "ipc://" + sandbox->state_dir() + "/rpc.sock";
  {
    // A second host process, as after the first one restarted: a fresh client and keys.
    rpc::ClientOptions options;
    options.endpoint = endpoint;
    auto fresh = rpc::Client::connect(options);
    ASSERT_TRUE(fresh) << fresh.status().to_string();
    auto list = (*fresh)->call("job.list");
    ASSERT_TRUE(list);
    ASSERT_EQ((*list)["jobs"].size(), 2u);
    EXPECT_EQ((*list)["jobs"][0]["state"], "finished");
    EXPECT_NE((*list)["jobs"][1]["state"], "finished");
    rpc::CallOptions wait;
    wait.timeout_ms = 30'000;
    auto finished = (*fresh)->call("job.wait", {{"job_id", running}, {"timeout_s", 20}}, std::move(wait));
    ASSERT_TRUE(finished);
    EXPECT_EQ((*finished)["result"]["stdout_tail"], "more\n");
  }
  EXPECT_EQ(sandbox->harvest(running).files["out/b"], "b\n");
}

TEST(JobJournal, AJobRunningWhenTheAgentDiedIsReportedLostWithWhatItLeft) {
  auto sandbox = JobsSandbox::start();
  ASSERT_TRUE(sandbox);
  std::string done = sandbox->submit({{"command", "echo ok > out/ok"}})["job_id"];
  sandbox->wait_finished(done);
  std::string id = sandbox->submit({{"command", "echo left > out/left.txt; sleep 1000"}})["job_id"];
  ASSERT_TRUE(wait_until([&] { return file_exists(sandbox->state_dir() + "/jobs/" + id + "/work/out/left.txt"); }, milliseconds(20'000)))
      << sandbox->box().stderr_text();
  ASSERT_TRUE(sandbox->box().signal(SIGKILL));  // PID 1 dies; its namespace with it
  ASSERT_TRUE(sandbox->box().wait_exit(milliseconds(10'000)).has_value());

  auto again = JobsSandbox::start({}, sandbox->state_dir());
  ASSERT_TRUE(again);
  // On any failure below: the journal the new agent replayed, and what it logged.
  auto context = [&] {
    return "journal:\n" + read_file(sandbox->state_dir() + "/events.jsonl") + "agent:\n" + again->box().stderr_text();
  };
  json info = again->wait_finished(id);
  EXPECT_EQ(info["result"]["status"], "lost") << info.dump() << "\n" << context();
  EXPECT_EQ(info["result"]["error_kind"], "lost");
  EXPECT_EQ(again->harvest(id).files["out/left.txt"], "left\n") << context();
  auto list = again->call("job.list", json::object());
  ASSERT_TRUE(list) << list.status().to_string();
  ASSERT_EQ((*list)["jobs"].size(), 2u) << list->dump();
  EXPECT_EQ((*list)["jobs"][0]["status"], "succeeded") << "the finished one is remembered as it was: " << list->dump();
  std::string next = again->submit({{"command", "true"}})["job_id"];
  EXPECT_EQ(next, "job-3") << "ids are never reused";
  again->wait_finished(next);
  auto events = read_file(sandbox->state_dir() + "/events.jsonl");
  EXPECT_NE(events.find("\"event\":\"lost\""), std::string::npos) << context();
}

TEST(JobWatchdogs, IdleShutsTheAgentDownAndPersistsUnacknowledgedArchives) {
  std::string persistent = make_temp_dir("gpubox-persist");
  {
    auto sandbox = JobsSandbox::start({{"lifecycle", {{"idle_timeout_seconds", 1}, {"persistent_dir", persistent}}}});
    ASSERT_TRUE(sandbox);
    std::string id = sandbox->submit({{"command", "echo keep > out/keep.txt; sleep 1.5"}})["job_id"];
    sandbox->wait_finished(id);
    auto began = Clock::now();
    auto status = sandbox->box().wait_exit(milliseconds(10'000));
    ASSERT_TRUE(status.has_value()) << "the idle watchdog did not fire";
    EXPECT_EQ(*status, 0);
    EXPECT_LT(std::chrono::duration<double>(Clock::now() - began).count(), 5.0) << "about the 1 s idle timeout";
    std::string copy = persistent + "/" + id;
    json manifest = json::parse(read_file(copy + "/manifest.json"));
    Harvest harvest = open_archive(copy + "/archive.tar.zst", manifest, sandbox->box().path("persisted"));
    EXPECT_EQ(harvest.files["out/keep.txt"], "keep\n");
    std::string events = read_file(sandbox->state_dir() + "/events.jsonl");
    EXPECT_NE(events.find("\"event\":\"persisted\""), std::string::npos);
    EXPECT_NE(events.find(copy), std::string::npos) << "the journal says where";
  }
  std::filesystem::remove_all(persistent);
}

TEST(JobWatchdogs, LeaseExpiryStopsTheRunningJobAndShutsDown) {
  std::string persistent = make_temp_dir("gpubox-persist");
  {
    auto sandbox = JobsSandbox::start({{"lifecycle", {{"lease_seconds", 1}, {"persistent_dir", persistent}}}});
    ASSERT_TRUE(sandbox);
    std::string id = sandbox->submit({{"command", "echo mine > out/mine.txt; while :; do sleep 0.05; done"}})["job_id"];
    for (int i = 0; i < 6; ++i) {
      auto beat = sandbox->call("sys.heartbeat", json::object());
      ASSERT_TRUE(beat) << "heartbeats keep it alive";
      EXPECT_GT((*beat)["lease_expires_in_s"].get<double>(), 0.9);
      std::this_thread::sleep_for(milliseconds(300));
    }
    ASSERT_TRUE(sandbox->box().running());
    auto status = sandbox->box().wait_exit(milliseconds(10'000));
    ASSERT_TRUE(status.has_value()) << "the lease did not expire";
    json result = json::parse(read_file(persistent + "/" + id + "/result.json"));
    EXPECT_EQ(result["status"], "killed");
    EXPECT_EQ(result["error_kind"], "lease");
    json manifest = json::parse(read_file(persistent + "/" + id + "/manifest.json"));
    Harvest harvest = open_archive(persistent + "/" + id + "/archive.tar.zst", manifest, sandbox->box().path("persisted"));
    EXPECT_EQ(harvest.files["out/mine.txt"], "mine\n");
  }
  std::filesystem::remove_all(persistent);
}

}  // namespace
}  // namespace gpubox::testing
