// `gpubox submit`, `jobs`, `wait`, `logs ID JOB` and `cancel`: batch jobs in a
// sandbox (rpc/PROTOCOL.md, "Jobs"). Everything the CLI can check on the host
// (input files, --output specs, numbers) is checked before anything is sent,
// so a refused submission leaves nothing behind.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <set>

#include "host/budget/sandbox_budget.h"
#include "host/cli/cli.h"
#include "host/cli/input_archive.h"
#include "base/sha256.h"
#include "base/terminal_text.h"

namespace gpubox::host::cli {
namespace {

constexpr std::size_t kUploadChunk = 1 << 20;

bool json_output(const Global& global, const Args& args) { return global.json || args.flag("--json"); }

// One --input: the local file (for a directory, its packed archive), and the
// bare name it gets in the job's work dir.
struct LocalInput {
  std::string path;
  std::string name;
  std::uint64_t size = 0;
  std::string sha256;
  std::unique_ptr<InputArchive> archive;  // a directory's, removed with the input
};

std::string base_name(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// Reads a file through once for its size and sha256.
Status hash_file(LocalInput& input) {
  int fd = ::open(input.path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::from_errno(errno, "--input '" + input.path + "': cannot read it");
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status(ErrorCode::invalid_request, "--input '" + input.path + "': not a regular file");
  }
  Sha256 sha;
  std::string buffer(kUploadChunk, '\0');
  while (true) {
    ssize_t n = ::read(fd, buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      Status error = Status::from_errno(errno, "--input '" + input.path + "': cannot read it");
      ::close(fd);
      return error;
    }
    if (n == 0) break;
    sha.update(buffer.data(), static_cast<std::size_t>(n));
    input.size += static_cast<std::uint64_t>(n);
  }
  ::close(fd);
  input.sha256 = sha.hex_digest();
  return Status::ok();
}

// Streams the inputs after job.submit's CALL: DATA {"name"} with 1 MiB chunks, then {"eof": true}.
Status send_inputs(rpc::Stream& stream, const std::vector<LocalInput>& inputs) {
  for (const auto& input : inputs) {
    int fd = ::open(input.path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return Status::from_errno(errno, "--input '" + input.path + "': cannot read it");
    std::uint64_t sent = 0;
    Status status = Status::ok();
    while (sent < input.size && status) {
      std::string chunk(static_cast<std::size_t>(std::min<std::uint64_t>(kUploadChunk, input.size - sent)), '\0');
      ssize_t n = ::read(fd, chunk.data(), chunk.size());
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;  // the file shrank: the agent reports input_changed
      chunk.resize(static_cast<std::size_t>(n));
      sent += static_cast<std::uint64_t>(n);
      std::vector<zmq::message_t> attachments;
      attachments.emplace_back(chunk.data(), chunk.size());
      status = stream.send({{"name", input.name}}, std::move(attachments));
    }
    ::close(fd);
    if (!status) return status;  // the request ended early: its result says why
  }
  return stream.send({{"eof", true}});
}

// A command line for /bin/sh -c: one argument is shell text as it is; several are quoted one by one.
std::string shell_command(const std::vector<std::string>& words) {
  if (words.size() == 1) return words[0];
  std::string command;
  for (const auto& word : words) {
    if (!command.empty()) command += ' ';
    std::string quoted = "'";
    for (char c : word) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
    command += quoted + "'";
  }
  return command;
}

// The sandbox named by positional[0], connected; or the exit code after saying why not.
struct Connected {
  std::unique_ptr<rpc::Client> client;
  int code = kExitOk;
  SandboxRecord record;
};

Connected connect(const std::string& command, const std::string& id_or_name) {
  auto record = find_sandbox(id_or_name);
  if (!record) return {nullptr, fail(command, record.status(), exit_code_for(record.status())), {}};
  auto client = connect_sandbox(*record);
  if (!client) return {nullptr, fail(command, client.status(), kExitUnreachable), {}};
  return {std::move(*client), kExitOk, std::move(*record)};
}

// The exit code for an agent's refusal of a job call: an unknown job is a usage error.
int job_error(const std::string& command, const Status& status) {
  int code = status.code() == ErrorCode::not_found || status.code() == ErrorCode::invalid_request ? kExitUsage
             : status.code() == ErrorCode::unavailable                                              ? kExitUnreachable
                                                                                                    : kExitFailed;
  return fail(command, status.to_string(), code);
}

// A value of the agent's answer as the terminal shows it: nothing the job put in it acts on the terminal.
std::string text_of(const nlohmann::json& value) {
  if (value.is_null()) return "-";
  return escape_for_terminal(value.is_string() ? value.get<std::string>() : value.dump());
}

// "succeeded in 1.2 s" / "failed: exit code 3 …": a result record in one line.
std::string result_line(const nlohmann::json& result) {
  std::string status = escape_for_terminal(result.value("status", "?"));
  char wall[32];
  std::snprintf(wall, sizeof wall, "%.2f s", result.value("job_wall_s", 0.0));
  std::string line = status + " after " + wall;
  if (result.contains("exit_code") && !result["exit_code"].is_null()) line += ", exit code " + text_of(result["exit_code"]);
  if (result.contains("signal") && !result["signal"].is_null()) line += ", signal " + text_of(result["signal"]);
  if (result.contains("deadline_fired") && !result["deadline_fired"].is_null()) {
    line += ", deadline " + text_of(result["deadline_fired"]);
  }
  if (result.contains("error_kind") && !result["error_kind"].is_null()) line += " (" + text_of(result["error_kind"]) + ")";
  return line;
}

}  // namespace

int run_submit(const std::vector<std::string>& raw, const Global& global) {
  constexpr char kUsage[] =
      "usage: gpubox submit ID|NAME [--input FILE|DIR]... [--timeout S] [--output GLOB[:featured|hidden]]...\n"
      "                     [--intent TEXT] [--env K=V]... [--budget NAME|none] [--json] -- COMMAND...\n"
      "  runs COMMAND with /bin/sh -c in the job's own work dir (inputs beside it, results go to out/)\n"
      "  and prints the job id (--json: the job's record). One COMMAND word is shell text as it is;\n"
      "  several are quoted one by one. A DIR input arrives as a directory of that name (sent as a tar,\n"
      "  sha256-checked, unpacked safely). --output globs are relative to out/ (featured by default); without\n"
      "  --output the first 20 files of out/ are featured. Under a budget (--budget, else the sandbox's, else\n"
      "  the default), a --timeout that outlives what the sandbox holds reserves the rest first (docs/budget.md).\n";
  auto args = parse_args(raw, {"--input", "--timeout", "--output", "--intent", "--env", "--budget"}, {});
  if (!args) return fail_usage("submit", args.status());
  if (args->flag("--help")) return show_usage(kUsage);
  if (!args->has_double_dash || args->command.empty()) return fail_usage("submit", "expected -- COMMAND");
  if (args->positional.size() != 1) return fail_usage("submit", "expected one sandbox id or name before --");

  nlohmann::json params = {{"command", shell_command(args->command)}};
  if (auto timeout = args->last("--timeout")) {
    auto seconds = parse_number(*timeout, 0.001, 365.0 * 86400);
    if (!seconds) return fail("submit", "--timeout '" + *timeout + "': expected seconds > 0", kExitUsage);
    params["timeout_seconds"] = *seconds;
  }
  if (auto intent = args->last("--intent")) params["intent"] = *intent;
  nlohmann::json env = nlohmann::json::object();
  for (const auto& pair : args->all("--env")) {
    auto eq = pair.find('=');
    if (eq == std::string::npos || eq == 0) return fail("submit", "--env '" + pair + "': expected K=V", kExitUsage);
    env[pair.substr(0, eq)] = pair.substr(eq + 1);
  }
  if (!env.empty()) params["env"] = env;
  nlohmann::json outputs = nlohmann::json::array();
  for (const auto& spec : args->all("--output")) {
    std::string glob = spec, kind = "featured";
    if (auto colon = spec.rfind(':'); colon != std::string::npos) {
      glob = spec.substr(0, colon);
      kind = spec.substr(colon + 1);
      if (kind != "featured" && kind != "hidden") {
        return fail("submit", "--output '" + spec + "': the kind after ':' must be featured or hidden", kExitUsage);
      }
    }
    if (glob.empty() || glob[0] == '/') {
      return fail("submit", "--output '" + spec + "': expected a glob relative to out/", kExitUsage);
    }
    outputs.push_back({{"glob", glob}, {"kind", kind}});
  }
  if (!outputs.empty()) params["outputs"] = outputs;
  std::vector<LocalInput> inputs;
  std::set<std::string> names;
  for (const auto& path : args->all("--input")) {
    LocalInput input{path, base_name(path), 0, "", nullptr};
    if (std::error_code error; std::filesystem::is_directory(path, error)) {
      auto packed = InputArchive::pack(path);
      if (!packed) return fail("submit", packed.status(), kExitUsage);
      input.archive = std::move(*packed);
      input.path = input.archive->path();
    }
    if (Status hashed = hash_file(input); !hashed) return fail("submit", hashed.message(), kExitUsage);
    if (!names.insert(input.name).second) {
      return fail("submit", "--input '" + path + "': another input is also named '" + input.name + "'", kExitUsage);
    }
    inputs.push_back(std::move(input));
  }
  if (!inputs.empty()) {
    params["inputs"] = nlohmann::json::array();
    for (const auto& input : inputs) {
      nlohmann::json declared = {{"name", input.name}, {"sha256", input.sha256}, {"size", input.size}};
      if (input.archive) declared["kind"] = "dir";  // only then: an older agent still takes plain files
      params["inputs"].push_back(std::move(declared));
    }
  }

  Connected sandbox = connect("submit", args->positional[0]);
  if (!sandbox.client) return sandbox.code;
  // A job that may outlive what its sandbox's budget holds: the rest is reserved before it is sent.
  auto store = SandboxStore::open_default();
  if (!store) return fail("submit", store.status(), kExitUsage);
  auto reserved = budget::reserve_for_job(*store, sandbox.record, args->last("--budget").value_or(""), "job",
                                          params.value("timeout_seconds", 0.0), 0);
  if (!reserved) return fail_budget("submit", reserved.status());
  auto settle_refusal = [&](const Status& status) {
    // The agent refused the job: nothing runs for it. Any other failure keeps it held until the sandbox ends.
    if (*reserved && (status.code() == ErrorCode::invalid_request || status.code() == ErrorCode::not_found)) {
      (void)budget::BudgetBook(store->root()).release((*reserved)->id, "the agent refused the job: " + status.message());
    }
  };
  Result<nlohmann::json> info = nlohmann::json();
  if (inputs.empty()) {
    info = sandbox.client->call("job.submit", params);
  } else {
    auto stream = sandbox.client->stream("job.submit", params);
    if (!stream) return job_error("submit", stream.status());
    (void)send_inputs(**stream, inputs);  // a failure ends the request: its result says why
    while (true) {
      auto next = (*stream)->next();
      if (!next) return job_error("submit", next.status());
      if (!next->has_value()) break;
    }
    info = (*stream)->result();
  }
  if (!info) {
    settle_refusal(info.status());
    return job_error("submit", info.status());
  }
  if (*reserved) (void)budget::BudgetBook(store->root()).confirm((*reserved)->id, sandbox.record.id, "");
  if (json_output(global, *args)) {
    std::cout << info->dump() << "\n";
  } else {
    std::printf("%s\n", escape_for_terminal(info->value("job_id", "")).c_str());
  }
  return kExitOk;
}

int run_jobs(const std::vector<std::string>& raw, const Global& global) {
  constexpr char kUsage[] = "usage: gpubox jobs ID|NAME [--json]   (every job of the sandbox, in submission order)\n";
  auto args = parse_args(raw, {}, {});
  if (!args) return fail_usage("jobs", args.status());
  if (args->flag("--help")) return show_usage(kUsage);
  if (args->positional.size() != 1) return fail_usage("jobs", "expected one sandbox id or name");
  Connected sandbox = connect("jobs", args->positional[0]);
  if (!sandbox.client) return sandbox.code;
  auto list = sandbox.client->call("job.list", nlohmann::json::object());
  if (!list) return job_error("jobs", list.status());
  const auto& jobs = (*list)["jobs"];
  if (json_output(global, *args)) {
    std::cout << jobs.dump() << "\n";
    return kExitOk;
  }
  std::printf("%-8s  %-9s  %-10s  %-8s  %s\n", "JOB", "STATE", "STATUS", "WALL", "COMMAND");
  for (const auto& job : jobs) {
    const auto& result = job.value("result", nlohmann::json::object());
    std::string status = job.value("state", "") == "finished" ? result.value("status", job.value("status", "-")) : "-";
    char wall[32] = "-";
    if (result.is_object() && result.contains("job_wall_s")) std::snprintf(wall, sizeof wall, "%.2fs", result.value("job_wall_s", 0.0));
    std::string command = job.value("command", "");
    if (command.size() > 60) command = command.substr(0, 57) + "...";
    // Ids, states and commands come from the agent, and a command from whoever submitted it.
    std::printf("%-8s  %-9s  %-10s  %-8s  %s\n", escape_for_terminal(job.value("job_id", "")).c_str(),
                escape_for_terminal(job.value("state", "")).c_str(), escape_for_terminal(status).c_str(), wall,
                escape_for_terminal(command).c_str());
  }
  return kExitOk;
}

int run_wait(const std::vector<std::string>& raw, const Global& global) {
  constexpr char kUsage[] =
      "usage: gpubox wait ID|NAME JOB [--timeout S] [--json]\n"
      "  waits for JOB to finish and prints its result; exit 0 if it succeeded, 1 if it did not,\n"
      "  124 if --timeout passed first (the job keeps running).\n";
  auto args = parse_args(raw, {"--timeout"}, {});
  if (!args) return fail_usage("wait", args.status());
  if (args->flag("--help")) return show_usage(kUsage);
  if (args->positional.size() != 2) return fail_usage("wait", "expected ID JOB");
  std::optional<double> limit;
  if (auto timeout = args->last("--timeout")) {
    limit = parse_number(*timeout, 0, 365.0 * 86400);
    if (!limit) return fail("wait", "--timeout '" + *timeout + "': expected seconds >= 0", kExitUsage);
  }
  Connected sandbox = connect("wait", args->positional[0]);
  if (!sandbox.client) return sandbox.code;
  const std::string& job = args->positional[1];
  auto start = std::chrono::steady_clock::now();
  nlohmann::json info;
  while (true) {
    double poll = 30;
    if (limit) {
      double left = *limit - std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      poll = std::max(0.0, std::min(poll, left));
    }
    auto waited = sandbox.client->call("job.wait", {{"job_id", job}, {"timeout_s", poll}});
    if (!waited) return job_error("wait", waited.status());
    info = *waited;
    if (info.value("state", "") == "finished" || poll < 30) break;
  }
  bool finished = info.value("state", "") == "finished";
  const auto& result = info.value("result", nlohmann::json::object());
  if (json_output(global, *args)) {
    std::cout << info.dump() << "\n";
  } else if (!finished) {
    std::printf("%s: still %s after --timeout %s s\n", escape_for_terminal(job).c_str(),
                escape_for_terminal(info.value("state", "?")).c_str(), args->last("--timeout").value_or("").c_str());
  } else {
    std::printf("%s: %s\n", escape_for_terminal(job).c_str(), result_line(result).c_str());
    if (result.contains("system_hint") && result["system_hint"].is_string() && !result["system_hint"].get<std::string>().empty()) {
      std::printf("hint: %s\n", escape_for_terminal(result["system_hint"].get<std::string>()).c_str());
    }
    auto files = result.value("output_files", nlohmann::json::array());
    auto featured = result.value("featured_files", nlohmann::json::array());
    std::printf("outputs: %zu file(s)%s\n", files.size(), featured.empty() ? "" : ", featured:");
    for (const auto& file : featured) std::printf("  out/%s\n", text_of(file).c_str());
    for (const auto& missing : result.value("missing_files", nlohmann::json::array())) {
      std::printf("missing: %s\n", text_of(missing).c_str());
    }
    std::string stderr_tail = result.value("stderr_tail", "");
    if (result.value("status", "") != "succeeded" && !stderr_tail.empty()) {
      if (stderr_tail.size() > 2000) stderr_tail = "..." + stderr_tail.substr(stderr_tail.size() - 2000);
      // A summary, not the stream the user asked for (`gpubox logs ID JOB --stderr` gives that raw): escaped, lines kept.
      std::printf("stderr (end):\n%s%s", escape_for_terminal(stderr_tail, true).c_str(), stderr_tail.back() == '\n' ? "" : "\n");
    }
  }
  if (!finished) return kExitWaitTimedOut;
  return result.value("status", "") == "succeeded" ? kExitOk : kExitFailed;
}

int run_job_logs(const Args& args, const Global&) {
  const std::string& job = args.positional[1];
  Connected sandbox = connect("logs", args.positional[0]);
  if (!sandbox.client) return sandbox.code;
  std::string which = args.flag("--stderr") ? "stderr" : "stdout";
  FILE* sink = stdout;  // either log goes to stdout, so that it pipes
  nlohmann::json params = {{"job_id", job}, {"stream", which}};
  if (!(args.flag("-f") || args.flag("--follow"))) {
    params["tail_bytes"] = 16 << 20;
    auto logs = sandbox.client->call("job.logs", params);
    if (!logs) return job_error("logs", logs.status());
    const auto& data = (*logs)["data"];
    if (data.is_binary()) std::fwrite(data.get_binary().data(), 1, data.get_binary().size(), sink);
    else if (data.is_string()) std::fputs(data.get_ref<const std::string&>().c_str(), sink);
    return kExitOk;
  }
  params["follow"] = true;
  params["offset"] = 0;
  auto stream = sandbox.client->stream("job.logs", params);
  if (!stream) return job_error("logs", stream.status());
  while (true) {
    auto next = (*stream)->next();
    if (!next) return job_error("logs", next.status());
    if (!next->has_value()) break;
    for (const auto& chunk : (*next)->attachments) std::fwrite(chunk.data(), 1, chunk.size(), sink);
    std::fflush(sink);
  }
  if (!(*stream)->result()) return job_error("logs", (*stream)->result().status());
  return kExitOk;
}

int run_cancel(const std::vector<std::string>& raw, const Global& global) {
  constexpr char kUsage[] =
      "usage: gpubox cancel ID|NAME JOB [--json]\n"
      "  a queued job ends at once; a running one gets TERM, then KILL after the grace. Its outputs are still staged.\n";
  auto args = parse_args(raw, {}, {});
  if (!args) return fail_usage("cancel", args.status());
  if (args->flag("--help")) return show_usage(kUsage);
  if (args->positional.size() != 2) return fail_usage("cancel", "expected ID JOB");
  Connected sandbox = connect("cancel", args->positional[0]);
  if (!sandbox.client) return sandbox.code;
  auto info = sandbox.client->call("job.cancel", {{"job_id", args->positional[1]}});
  if (!info) return job_error("cancel", info.status());
  if (json_output(global, *args)) {
    std::cout << info->dump() << "\n";
  } else {
    std::printf("%s: %s\n", escape_for_terminal(args->positional[1]).c_str(), escape_for_terminal(info->value("state", "?")).c_str());
  }
  return kExitOk;
}

}  // namespace gpubox::host::cli
