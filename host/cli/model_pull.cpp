// `gpubox model ID pull REPO --volume NAME | --to DIR`: a job in the sandbox
// (the image's python3 and huggingface_hub, running host/cli/model_pull.py,
// which this CLI carries) downloads a Hugging Face repository into a volume
// unless config.json or adapter_config.json is already there. HF_TOKEN from
// this environment travels as the job's secret (in no argv, command, journal
// or job info). The CLI follows the job's stdout for progress and its result.
// One thread.
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <iostream>
#include <memory>
#include <regex>

#include "host/budget/sandbox_budget.h"
#include "base/terminal_text.h"
#include "host/cli/cli.h"
#include "host/cli/progress.h"
#include "host/backends/create_flags.h"
#include "host/backends/registry.h"
#include "base/sha256.h"

namespace gpubox::host::cli {

extern const char kModelPullSource[];  // generated from host/cli/model_pull.py

namespace {

using nlohmann::json;

const std::string kPullCommand = "model pull";
constexpr char kScriptName[] = "gpubox_pull.py";

// Hugging Face's repo id rules: [ORG/]NAME of A-Z a-z 0-9 . _ -, no "--" or "..", at most 96 a part.
bool valid_repo(const std::string& repo) {
  static const std::regex kRepo("[A-Za-z0-9]([A-Za-z0-9._-]{0,94}[A-Za-z0-9])?(/[A-Za-z0-9]([A-Za-z0-9._-]{0,94}[A-Za-z0-9])?)?");
  return std::regex_match(repo, kRepo) && repo.find("..") == std::string::npos && repo.find("--") == std::string::npos;
}

// A relative path of plain components (no "..", no empty one), or "." for the root itself.
bool valid_subdir(const std::string& dir) {
  static const std::regex kDir("[A-Za-z0-9_][A-Za-z0-9._-]*(/[A-Za-z0-9_][A-Za-z0-9._-]*)*");
  return dir == "." || (std::regex_match(dir, kDir) && dir.find("..") == std::string::npos);
}

std::string shell_word(const std::string& word) {
  std::string text = "'";
  for (char c : word) text += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return text + "'";
}

// The backend whose --volume NAME:/path mounts a volume of that name (the first that defines --volume).
std::string volume_backend() {
  auto owners = backends_defining("--volume", all_backends());
  return owners.empty() ? "?" : owners.front()->name();
}

// The mount point of the sandbox's volume NAME (create's --volume NAME:/path).
Result<std::string> volume_path(const SandboxRecord& record, const std::string& name) {
  std::string listed;
  const json volumes = record.spec.value("volumes", json::array());
  for (const auto& entry : volumes) {
    std::string text = entry.is_string() ? entry.get<std::string>() : "";
    auto colon = text.find(':');
    if (colon != std::string::npos && text.substr(0, colon) == name) return text.substr(colon + 1);
    listed += (listed.empty() ? "" : ", ") + text;
  }
  return Status::invalid_request("--volume " + name + ": sandbox " + record.id + " has no such volume (" +
             (listed.empty() ? "it has none; `gpubox create --backend " + volume_backend() + " --volume NAME:/path` mounts one"
                             : "its volumes: " + listed) +
             ")");
}

// Where the files go: ROOT/REPO (its '/' kept), or ROOT/SUBDIR; ROOT is the volume's mount or --to.
Result<std::string> target_dir(const Args& args, const SandboxRecord& record, const std::string& repo) {
  auto volume = args.last("--volume");
  auto to = args.last("--to");
  if (volume.has_value() == to.has_value()) return Status::invalid_request("give --volume NAME (a volume of the sandbox) or --to /DIR, one of them");
  std::string root;
  if (volume) {
    auto path = volume_path(record, *volume);
    if (!path) return path.status();
    root = *path;
  } else {
    root = *to;
    while (root.size() > 1 && root.back() == '/') root.pop_back();
    auto under = [&](const std::string& dir) { return root == dir || root.rfind(dir + "/", 0) == 0; };
    if (root.empty() || root[0] != '/' || root == "/" || root.find("/../") != std::string::npos || root.find("/./") != std::string::npos ||
        (root.size() >= 3 && root.substr(root.size() - 3) == "/..") || under("/proc") || under(kSandboxStateDir)) {
      return Status::invalid_request("--to '" + *to + "': expected an absolute directory in the sandbox (not /, /proc or " + kSandboxStateDir + ")");
    }
  }
  std::string sub = args.last("--subdir").value_or(repo);
  if (!valid_subdir(sub)) return Status::invalid_request("--subdir '" + sub + "': expected a relative path such as models/llama (no '..')");
  return sub == "." ? root : root + "/" + sub;
}

// The job.submit params: the script as the job's one input, REPO, DIR and REVISION as its arguments.
Result<json> submit_params(const Args& args, const std::string& repo, const std::string& dir) {
  std::string command = "exec python3 " + std::string(kScriptName) + " --repo " + shell_word(repo) + " --dir " + shell_word(dir);
  if (auto revision = args.last("--revision")) {
    static const std::regex kRevision("[A-Za-z0-9._/-]{1,200}");
    if (!std::regex_match(*revision, kRevision) || revision->find("..") != std::string::npos) {
      return Status::invalid_request("--revision '" + *revision + "': expected a branch, tag or commit (A-Z a-z 0-9 . _ / -)");
    }
    command += " --revision " + shell_word(*revision);
  }
  Sha256 sha;
  sha.update(kModelPullSource, std::strlen(kModelPullSource));
  json params = {{"command", command},
                 {"intent", "gpubox model pull " + repo + " into " + dir},
                 {"inputs", json::array({{{"name", kScriptName}, {"sha256", sha.hex_digest()}, {"size", std::strlen(kModelPullSource)}}})}};
  if (auto endpoint = args.last("--endpoint")) {
    if (endpoint->rfind("http://", 0) != 0 && endpoint->rfind("https://", 0) != 0) {
      return Status::invalid_request("--endpoint '" + *endpoint + "': expected the Hub's URL, http:// or https://");
    }
    params["env"] = {{"HF_ENDPOINT", *endpoint}};
  }
  if (auto timeout = args.last("--timeout")) {
    auto seconds = parse_number(*timeout, 1, 7 * 86400.0);
    if (!seconds) return Status::invalid_request("--timeout '" + *timeout + "': expected seconds from 1 to 604800");
    params["timeout_seconds"] = *seconds;
  }
  // The token as a job secret: in the job's environment only, never journaled or returned.
  if (const char* token = std::getenv("HF_TOKEN"); token && *token) params["secrets"] = {{"HF_TOKEN", token}};
  return params;
}

int job_error(const Status& status) {
  int code = status.code() == ErrorCode::not_found || status.code() == ErrorCode::invalid_request ? kExitUsage
             : status.code() == ErrorCode::unavailable                                              ? kExitUnreachable
                                                                                                    : kExitFailed;
  return fail(kPullCommand, status.to_string(), code);
}

// What the job printed: its start, its progress (drawn on stderr), its result or error.
class PullWatcher {
 public:
  explicit PullWatcher(std::string repo) : repo_(std::move(repo)) {}

  void add(const char* data, std::size_t size) {
    pending_.append(data, size);
    for (auto newline = pending_.find('\n'); newline != std::string::npos; newline = pending_.find('\n')) {
      line(pending_.substr(0, newline));
      pending_.erase(0, newline + 1);
    }
  }
  const json& result() const { return result_; }
  const std::string& error() const { return error_; }

 private:
  void line(const std::string& text) {
    json message = json::parse(text, nullptr, false);
    if (!message.is_object()) return;
    if (message.contains("start")) {
      const json& start = message["start"];
      bar_ = std::make_unique<Progress>(start.value("bytes", std::uint64_t{0}), "pulling " + repo_, 0);
    } else if (message.contains("progress")) {
      show(message["progress"]);
    } else if (message.contains("result")) {
      result_ = message["result"];
    } else if (message.contains("error") && message["error"].is_string()) {
      error_ = message["error"].get<std::string>();
    }
  }

  // A bar of bytes on a terminal; otherwise one line each time another file is done.
  void show(const json& progress) {
    auto files = progress.value("files_done", std::uint64_t{0}), files_total = progress.value("files_total", std::uint64_t{0});
    auto done = progress.value("bytes_done", std::uint64_t{0}), total = progress.value("bytes_total", std::uint64_t{0});
    if (bar_) bar_->set(done, total);
    if (::isatty(STDERR_FILENO) || files == files_shown_) return;
    files_shown_ = files;
    std::fprintf(stderr, "gpubox model pull: %llu/%llu files, %.1f/%.1f MiB\n", static_cast<unsigned long long>(files),
                 static_cast<unsigned long long>(files_total), static_cast<double>(done) / 1048576.0,
                 static_cast<double>(total) / 1048576.0);
  }

  std::string repo_;
  std::string pending_;
  std::unique_ptr<Progress> bar_;
  std::uint64_t files_shown_ = 0;
  json result_;
  std::string error_;
};

// Follows the job's stdout until it can no longer write, then waits for its result record.
Result<json> follow(rpc::Client& client, const std::string& job_id, PullWatcher& watcher) {
  auto stream = client.stream("job.logs", {{"job_id", job_id}, {"stream", "stdout"}, {"follow", true}, {"offset", 0}});
  if (!stream) return stream.status();
  while (true) {
    auto next = (*stream)->next();
    if (!next) return next.status();
    if (!next->has_value()) break;
    for (const auto& chunk : (*next)->attachments) watcher.add(static_cast<const char*>(chunk.data()), chunk.size());
  }
  if (!(*stream)->result()) return (*stream)->result().status();
  while (true) {
    auto waited = client.call("job.wait", {{"job_id", job_id}, {"timeout_s", 30}});
    if (!waited) return waited.status();
    if (waited->value("state", "") == "finished") return *waited;
  }
}

// Why a finished job did not succeed, in the script's words when it said.
std::string failure(const json& info, const PullWatcher& watcher) {
  if (!watcher.error().empty()) return watcher.error();
  const json result = info.value("result", json::object());
  std::string why = "the pull job " + info.value("job_id", "") + " " + result.value("status", "failed");
  std::string tail = result.value("stderr_tail", "");
  while (!tail.empty() && tail.back() == '\n') tail.pop_back();
  if (auto last = tail.rfind('\n'); last != std::string::npos) tail = tail.substr(last + 1);
  return tail.empty() ? why : why + ": " + tail;
}

}  // namespace

int run_model_pull(const Args& args, const Global& global) {
  const std::string& repo = args.positional[2];
  if (!valid_repo(repo)) {
    return fail(kPullCommand, "REPO '" + repo + "': expected a Hugging Face repo id such as ORG/NAME", kExitUsage);
  }
  auto record = find_sandbox(args.positional[0]);
  if (!record) return fail(kPullCommand, record.status(), exit_code_for(record.status()));
  auto dir = target_dir(args, *record, repo);
  if (!dir) return fail(kPullCommand, dir.status(), kExitUsage);
  auto params = submit_params(args, repo, *dir);
  if (!params) return fail(kPullCommand, params.status(), kExitUsage);
  auto client = connect_sandbox(*record);
  if (!client) return fail(kPullCommand, client.status(), kExitUnreachable);
  // Its sandbox's time past what the sandbox holds, and its egress, reserved before the job is sent.
  double egress_gib = 0;
  if (auto text = args.last("--egress-gib")) {
    auto value = parse_number(*text, 0, 1 << 20);
    if (!value) return fail(kPullCommand, "--egress-gib '" + *text + "': expected GiB from 0 to 1048576", kExitUsage);
    egress_gib = *value;
  }
  auto store = SandboxStore::open_default();
  if (!store) return fail(kPullCommand, store.status(), kExitUsage);
  auto reserved = budget::reserve_for_job(*store, *record, args.last("--budget").value_or(""), "pull",
                                          params->value("timeout_seconds", 0.0), egress_gib);
  if (!reserved) return fail_budget(kPullCommand, reserved.status());

  std::vector<zmq::message_t> script;
  script.emplace_back(kModelPullSource, std::strlen(kModelPullSource));
  rpc::CallOptions options;
  options.attachments = &script;
  auto submitted = (*client)->call("job.submit", *params, std::move(options));
  if (!submitted) {
    if (*reserved && submitted.status().code() == ErrorCode::invalid_request) {
      (void)budget::BudgetBook(store->root()).release((*reserved)->id, "the agent refused the pull: " + submitted.status().message());
    }
    return job_error(submitted.status());
  }
  if (*reserved) (void)budget::BudgetBook(store->root()).confirm((*reserved)->id, record->id, "");
  std::string job_id = submitted->value("job_id", "");
  std::fprintf(stderr, "gpubox model pull: job %s: %s into %s\n", escape_for_terminal(job_id).c_str(), escape_for_terminal(repo).c_str(),
               escape_for_terminal(*dir).c_str());

  PullWatcher watcher(repo);
  auto info = follow(**client, job_id, watcher);
  if (!info) return job_error(info.status());
  bool as_json = global.json || args.flag("--json");
  const json result = info->value("result", json::object());
  if (result.value("status", "") != "succeeded" || watcher.result().is_null()) {
    std::string why = failure(*info, watcher);
    if (const Backend* backend = find_backend(record->backend)) why += backend->network_hint(*record);
    return fail(kPullCommand, why, kExitFailed);
  }
  json shown = watcher.result();
  shown["job_id"] = job_id;
  if (as_json) {
    std::cout << shown.dump() << std::endl;
    return kExitOk;
  }
  if (shown.value("skipped", false)) {
    // What the pull job wrote (its marker, commit and path) is the sandbox's: nothing in it acts on the terminal.
    std::fprintf(stderr, "gpubox model pull: %s: already there (%s in %s), nothing downloaded\n", escape_for_terminal(repo).c_str(),
                 escape_for_terminal(shown.value("marker", "config.json")).c_str(), escape_for_terminal(*dir).c_str());
  } else {
    std::fprintf(stderr, "gpubox model pull: %s at %s: %llu files, %.1f MiB\n", escape_for_terminal(repo).c_str(),
                 escape_for_terminal(shown.value("commit", "?")).c_str(),
                 static_cast<unsigned long long>(shown.value("files", std::uint64_t{0})),
                 static_cast<double>(shown.value("bytes", std::uint64_t{0})) / 1048576.0);
  }
  std::cout << escape_for_terminal(shown.value("path", *dir)) << std::endl;
  return kExitOk;
}

}  // namespace gpubox::host::cli
