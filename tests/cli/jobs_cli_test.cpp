// gpubox submit / jobs / wait / logs ID JOB / result / cancel, end to end
// through the real CLI against real local sandboxes: inputs go up, outputs
// and logs come back through the hardened harvest, and bad input is refused
// with the documented exit code before anything is submitted.
#include <chrono>
#include <filesystem>
#include <random>
#include <thread>

#include <gmock/gmock.h>

#include "tests/cli/cli_fixture.h"

namespace gpubox::testing {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

// The jobs the agent holds, from `gpubox jobs ID --json`.
nlohmann::json job_list(const CliRun& listed) {
  EXPECT_EQ(listed.status, 0) << listed.err;
  return nlohmann::json::parse(listed.out, nullptr, false);
}

TEST_P(BackendCliTest, SubmitWithAnInputWaitLogsAndResultExtractsTheOutputs) {
  std::string id = create();
  std::string data = random_bytes(3 << 20, 7);  // above one 1 MiB chunk: streamed in several
  write_text(scratch() + "/data.bin", data);
  CliRun submitted = run({"submit", id, "--input", scratch() + "/data.bin", "--output", "*.txt", "--output", "raw/*:hidden",
                          "--intent", "checksum the data", "--env", "LABEL=sum", "--",
                          "mkdir -p out/raw; sha256sum data.bin | cut -c1-64 > out/$LABEL.txt; cp data.bin out/raw/copy.bin;"
                          " echo working; echo warning >&2"});
  ASSERT_EQ(submitted.status, 0) << submitted.err;
  std::string job = submitted.out.substr(0, submitted.out.find('\n'));
  EXPECT_THAT(job, ::testing::StartsWith("job-"));

  CliRun waited = run({"wait", id, job});
  EXPECT_EQ(waited.status, 0) << waited.out << waited.err;
  EXPECT_THAT(waited.out, HasSubstr(job + ": succeeded"));
  EXPECT_THAT(waited.out, HasSubstr("out/sum.txt"));

  CliRun logs = run({"logs", id, job});
  EXPECT_EQ(logs.status, 0) << logs.err;
  EXPECT_EQ(logs.out, "working\n");
  CliRun errors = run({"logs", id, job, "--stderr"});
  EXPECT_EQ(errors.out, "warning\n");
  CliRun followed = run({"logs", id, job, "-f"});  // a finished job's log: all of it, then the end
  EXPECT_EQ(followed.status, 0) << followed.err;
  EXPECT_EQ(followed.out, "working\n");
  EXPECT_THAT(run({"logs", id}).out, HasSubstr("agent ready")) << "without JOB, logs is still the agent's log";

  nlohmann::json jobs = job_list(run({"jobs", id, "--json"}));
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0]["job_id"], job);
  EXPECT_EQ(jobs[0]["intent"], "checksum the data");
  EXPECT_EQ(jobs[0]["result"]["status"], "succeeded");
  CliRun table = run({"jobs", id});
  EXPECT_THAT(table.out, HasSubstr(job));
  EXPECT_THAT(table.out, HasSubstr("succeeded"));

  std::string out = scratch() + "/harvest";
  CliRun result = run({"result", id, job, "--out", out});
  ASSERT_EQ(result.status, 0) << result.err;
  EXPECT_THAT(result.out, HasSubstr("extracted to " + out));
  EXPECT_THAT(result.out, HasSubstr(out + "/out/sum.txt")) << "the featured file is named";
  EXPECT_THAT(result.out, ::testing::Not(HasSubstr("copy.bin"))) << "hidden files are not featured";
  EXPECT_TRUE(read_text(out + "/out/raw/copy.bin") == data) << "the input went up and came back unchanged";
  EXPECT_EQ(read_text(out + "/out/sum.txt").size(), 65u);
  EXPECT_EQ(read_text(out + "/stdout.log"), "working\n");
  EXPECT_EQ(read_text(out + "/stderr.log"), "warning\n");
  EXPECT_FALSE(fs::exists(out + ".tar.zst")) << "the downloaded archive is removed once extracted";

  CliRun again = run({"result", id, job, "--out", out});
  EXPECT_EQ(again.status, 2) << "an existing --out is refused";
  EXPECT_THAT(again.err, HasSubstr("exists"));
}

TEST_F(CliTest, AFailingJobWaitsWithExitOneAndItsResultStillHasTheLogs) {
  std::string id = create();
  CliRun submitted = run({"submit", id, "--", "echo partial > out/partial.txt; echo before the crash; echo it broke >&2; exit 7"});
  ASSERT_EQ(submitted.status, 0) << submitted.err;
  std::string job = submitted.out.substr(0, submitted.out.find('\n'));
  CliRun waited = run({"wait", id, job});
  EXPECT_EQ(waited.status, 1);
  EXPECT_THAT(waited.out, HasSubstr("failed"));
  EXPECT_THAT(waited.out, HasSubstr("exit code 7"));
  EXPECT_THAT(waited.out, HasSubstr("it broke")) << "the end of stderr is shown";
  CliRun as_json = run({"--json", "wait", id, job});
  EXPECT_EQ(as_json.status, 1);
  EXPECT_EQ(nlohmann::json::parse(as_json.out)["result"]["exit_code"], 7);

  std::string out = scratch() + "/failed";
  CliRun result = run({"result", id, job, "--out", out});
  ASSERT_EQ(result.status, 0) << result.err;
  EXPECT_THAT(result.out, HasSubstr(job + " failed"));
  EXPECT_EQ(read_text(out + "/stdout.log"), "before the crash\n");
  EXPECT_EQ(read_text(out + "/stderr.log"), "it broke\n");
  EXPECT_EQ(read_text(out + "/out/partial.txt"), "partial\n") << "what the job wrote before failing is kept";
}

TEST_F(CliTest, LogsFollowsARunningJobToItsEndAndSubmitJsonIsTheRecord) {
  std::string id = create();
  CliRun submitted = run({"--json", "submit", id, "--intent", "two lines", "--", "echo one; sleep 1; echo two"});
  ASSERT_EQ(submitted.status, 0) << submitted.err;
  nlohmann::json record = nlohmann::json::parse(submitted.out);
  std::string job = record["job_id"];
  EXPECT_EQ(record["intent"], "two lines");
  EXPECT_EQ(record["command"], "echo one; sleep 1; echo two");
  auto start = std::chrono::steady_clock::now();
  CliRun followed = run({"logs", id, job, "--follow"});
  EXPECT_EQ(followed.status, 0) << followed.err;
  EXPECT_EQ(followed.out, "one\ntwo\n") << "followed to the job's end";
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(500)) << "it waited for the second line";
  // Several COMMAND words are quoted one by one: the argument with a space stays one argument.
  CliRun words = run({"submit", id, "--", "printf", "%s|", "a b", "c"});
  ASSERT_EQ(words.status, 0) << words.err;
  std::string second = words.out.substr(0, words.out.find('\n'));
  ASSERT_EQ(run({"wait", id, second}).status, 0);
  EXPECT_EQ(run({"logs", id, second}).out, "a b|c|");
}

TEST_F(CliTest, ResultAboveMaxSizeIsRefusedThenARaisedCapDownloadsIt) {
  std::string id = create();
  CliRun submitted = run({"submit", id, "--", "head -c 2000000 /dev/urandom > out/noise.bin"});
  ASSERT_EQ(submitted.status, 0) << submitted.err;
  std::string job = submitted.out.substr(0, submitted.out.find('\n'));
  ASSERT_EQ(run({"wait", id, job}).status, 0);
  std::string out = scratch() + "/big";
  CliRun refused = run({"result", id, job, "--out", out, "--max-size", "100000"});
  EXPECT_EQ(refused.status, 1);
  EXPECT_THAT(refused.err, HasSubstr("larger than --max-size 100000"));
  EXPECT_THAT(refused.err, HasSubstr("run again with --max-size"));
  EXPECT_FALSE(fs::exists(out)) << "nothing extracted";
  CliRun raised = run({"result", id, job, "--out", out, "--max-size", "10000000"});
  ASSERT_EQ(raised.status, 0) << raised.err;
  EXPECT_EQ(fs::file_size(out + "/out/noise.bin"), 2000000u);
  nlohmann::json jobs = job_list(run({"jobs", id, "--json"}));
  EXPECT_EQ(jobs.size(), 1u) << "the job ran once";
}

TEST_F(CliTest, ResultWithAckExtractsThenTheSandboxDeletesItsCopy) {
  std::string id = create();
  CliRun submitted = run({"submit", id, "--", "echo kept > out/kept.txt"});
  ASSERT_EQ(submitted.status, 0) << submitted.err;
  std::string job = submitted.out.substr(0, submitted.out.find('\n'));
  ASSERT_EQ(run({"wait", id, job}).status, 0);
  CliRun plain = run({"result", id, job, "--out", scratch() + "/first"});
  ASSERT_EQ(plain.status, 0) << plain.err;
  EXPECT_THAT(plain.out, ::testing::Not(HasSubstr("acknowledged")));
  CliRun acked = run({"result", id, job, "--out", scratch() + "/second", "--ack", "--json"});
  ASSERT_EQ(acked.status, 0) << acked.err;
  EXPECT_EQ(nlohmann::json::parse(acked.out)["acked"], true);
  EXPECT_EQ(read_text(scratch() + "/second/out/kept.txt"), "kept\n") << "extracted before the copy went";
  nlohmann::json jobs = job_list(run({"jobs", id, "--json"}));
  ASSERT_EQ(jobs.size(), 1u);
  EXPECT_EQ(jobs[0]["acked"], true);
  CliRun gone = run({"result", id, job, "--out", scratch() + "/third"});
  EXPECT_NE(gone.status, 0) << "the staged copy is deleted";
  EXPECT_THAT(gone.err, HasSubstr("acknowledged"));
  EXPECT_FALSE(fs::exists(scratch() + "/third"));
}

TEST_P(BackendCliTest, CancelStopsARunningJobAndItsOutputsAreStillStaged) {
  std::string id = create();
  CliRun submitted = run({"submit", id, "--", "echo started > out/progress.txt; echo up; exec sleep 300"});
  ASSERT_EQ(submitted.status, 0) << submitted.err;
  std::string job = submitted.out.substr(0, submitted.out.find('\n'));
  // The job is running once its stdout says so.
  for (int i = 0; i < 200 && run({"logs", id, job}).out != "up\n"; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CliRun early = run({"result", id, job, "--out", scratch() + "/early"});
  EXPECT_EQ(early.status, 1) << "a running job has no result yet";
  EXPECT_THAT(early.err, HasSubstr("gpubox wait"));
  EXPECT_FALSE(fs::exists(scratch() + "/early"));
  CliRun waited_out = run({"wait", id, job, "--timeout", "0.2"});
  EXPECT_EQ(waited_out.status, 124) << "wait --timeout ran out: its own code";
  EXPECT_THAT(waited_out.out, HasSubstr("still running"));
  CliRun cancelled = run({"cancel", id, job});
  EXPECT_EQ(cancelled.status, 0) << cancelled.err;
  CliRun waited = run({"wait", id, job, "--timeout", "60"});
  EXPECT_EQ(waited.status, 1);
  EXPECT_THAT(waited.out, HasSubstr("cancelled"));
  std::string out = scratch() + "/cancelled";
  CliRun result = run({"--json", "result", id, job, "--out", out});
  ASSERT_EQ(result.status, 0) << result.err;
  nlohmann::json harvested = nlohmann::json::parse(result.out);
  EXPECT_EQ(harvested["status"], "cancelled");
  EXPECT_EQ(harvested["dir"], out);
  EXPECT_EQ(read_text(out + "/out/progress.txt"), "started\n");
  EXPECT_EQ(run({"cancel", id, "job-999"}).status, 2) << "an unknown job";
}

TEST_F(CliTest, BadJobInputIsRefusedWithTheDocumentedExitCodeAndNothingIsSubmitted) {
  std::string id = create();
  write_text(scratch() + "/a.txt", "a");
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  std::vector<Case> cases = {
      {{"submit", id, "--input", scratch() + "/missing.bin", "--", "true"}, "missing.bin"},
      {{"submit", id, "--input", "/dev/null", "--", "true"}, "not a regular file"},
      {{"submit", id, "--input", scratch() + "/a.txt", "--input", scratch() + "/./a.txt", "--", "true"}, "also named"},
      {{"submit", id, "--output", "*.txt:shiny", "--", "true"}, "featured or hidden"},
      {{"submit", id, "--output", "/etc/*", "--", "true"}, "relative to out/"},
      {{"submit", id, "--timeout", "soon", "--", "true"}, "--timeout"},
      {{"submit", id, "--env", "=x", "--", "true"}, "K=V"},
      {{"submit", id, "true"}, "expected -- COMMAND"},
      {{"submit", "no-such-sandbox", "--", "true"}, "no-such-sandbox"},
      {{"wait", id, "job-42"}, "job-42"},
      {{"logs", id, "job-42"}, "job-42"},
      {{"result", id, "job-42", "--out", scratch() + "/r"}, "job-42"},
      {{"result", id, "job-1", "--max-size", "-5"}, "--max-size"},
  };
  for (const auto& bad : cases) {
    CliRun refused = run(bad.args);
    EXPECT_EQ(refused.status, 2) << bad.args[2] << ": " << refused.err;
    EXPECT_THAT(refused.err, HasSubstr(bad.message));
  }
  nlohmann::json jobs = job_list(run({"jobs", id, "--json"}));
  EXPECT_TRUE(jobs.empty()) << jobs.dump();
  EXPECT_FALSE(fs::exists(scratch() + "/r"));
  for (const char* command : {"submit", "jobs", "wait", "result", "cancel"}) {
    CliRun help = run({command, "--help"});
    EXPECT_EQ(help.status, 0);
    EXPECT_THAT(help.out, HasSubstr(std::string("usage: gpubox ") + command));
  }
}

TEST_F(CliTest, ADirectoryInputArrivesAsADirectoryUnderItsBaseName) {
  std::string id = create();
  std::string big = random_bytes(3 << 20, 9);
  fs::create_directories(scratch() + "/dataset/sub/deeper");
  write_text(scratch() + "/dataset/a.txt", "a\n");
  write_text(scratch() + "/dataset/sub/deeper/big.bin", big, 0600);
  fs::create_symlink("sub/deeper/big.bin", scratch() + "/dataset/link");
  CliRun submitted = run({"submit", id, "--input", scratch() + "/dataset/", "--", "find dataset | sort; cat dataset/a.txt;"
                          " sha256sum < dataset/link | cut -c1-64; stat -c %a dataset/sub/deeper/big.bin; ls -A"});
  ASSERT_EQ(submitted.status, 0) << submitted.err;
  std::string job = submitted.out.substr(0, submitted.out.find('\n'));
  ASSERT_EQ(run({"wait", id, job}).status, 0);
  CliRun logs = run({"logs", id, job});
  EXPECT_THAT(logs.out, HasSubstr("dataset\ndataset/a.txt\ndataset/link\ndataset/sub\ndataset/sub/deeper\n"
                                  "dataset/sub/deeper/big.bin\na\n"));
  // The same bytes, hashed in the sandbox after a plain `put`.
  ASSERT_EQ(run({"put", id, scratch() + "/dataset/sub/deeper/big.bin", "/tmp/big.bin"}).status, 0);
  std::string expected = run({"exec", id, "--", "sh", "-c", "sha256sum < /tmp/big.bin | cut -c1-64"}).out;
  EXPECT_EQ(expected.size(), 65u);
  EXPECT_THAT(logs.out, HasSubstr("a\n" + expected + "600\n")) << "content through the symlink and modes kept";
  EXPECT_THAT(logs.out, HasSubstr("600\ndataset\nout\n")) << "no archive left beside it: " << logs.out;

  // A symlink that points outside is refused by the agent's extractor: nothing starts.
  fs::create_directories(scratch() + "/hostile");
  fs::create_symlink("/etc/passwd", scratch() + "/hostile/evil");
  CliRun refused = run({"submit", id, "--input", scratch() + "/hostile", "--", "cat hostile/evil > out/stolen"});
  EXPECT_EQ(refused.status, 2) << refused.out << refused.err;
  EXPECT_THAT(refused.err, HasSubstr("symlink pointing outside"));
  EXPECT_EQ(job_list(run({"jobs", id, "--json"})).size(), 1u) << "the refused job was never submitted";
}

TEST_F(CliTest, WithoutOutputRulesEveryFileIsFeaturedUpToTwentyAndResultUsesTheSandboxName) {
  std::string id = create({"--name", "harvester"});
  CliRun submitted = run({"submit", id, "--", "for i in $(seq -w 1 25); do echo $i > out/f$i.txt; done; mkdir out/sub; echo s > out/sub/s.txt"});
  ASSERT_EQ(submitted.status, 0) << submitted.err;
  std::string job = submitted.out.substr(0, submitted.out.find('\n'));
  CliRun waited = run({"--json", "wait", "harvester", job});
  ASSERT_EQ(waited.status, 0) << waited.out << waited.err;
  nlohmann::json result = nlohmann::json::parse(waited.out)["result"];
  EXPECT_EQ(result["output_files"].size(), 26u);
  ASSERT_EQ(result["featured_files"].size(), 20u) << "featured by default, the first 20";
  EXPECT_EQ(result["featured_files"][0], "f01.txt");

  CliRun only_one = run({"submit", id, "--output", "f01.txt", "--", "echo 1 > out/f01.txt; echo 2 > out/f02.txt"});
  std::string second = only_one.out.substr(0, only_one.out.find('\n'));
  CliRun second_wait = run({"--json", "wait", id, second});
  EXPECT_EQ(nlohmann::json::parse(second_wait.out)["result"]["featured_files"], nlohmann::json::array({"f01.txt"}))
      << "with --output, only what it names";

  // result's default folder: ./NAME-JOB for a named sandbox.
  fs::path previous = fs::current_path();
  fs::current_path(scratch());
  CliRun harvested = run({"result", id, job});
  fs::current_path(previous);
  ASSERT_EQ(harvested.status, 0) << harvested.err;
  EXPECT_EQ(read_text(scratch() + "/harvester-" + job + "/out/f25.txt"), "25\n");
  EXPECT_THAT(harvested.out, HasSubstr("harvester-" + job + "/out/f01.txt"));
}

}  // namespace
}  // namespace gpubox::testing
