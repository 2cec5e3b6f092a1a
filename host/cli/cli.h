// What the `gpubox` subcommands share: exit codes, argument parsing, finding
// a sandbox by id or name and connecting to it. One thread.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "host/args.h"
#include "host/backends/backend.h"
#include "host/cli/help_lines.h"
#include "host/sandbox_store.h"
#include "host/snapshot.h"
#include "rpc/client.h"
#include "base/status.h"

namespace gpubox::host::cli {

// The CLI's exit codes (docs/cli.md, "Exit codes"). exec exits with the remote command's code instead.
enum ExitCode : int {
  kExitOk = 0,
  kExitFailed = 1,       // the remote command or call failed
  kExitUsage = 2,        // usage or config error, unknown sandbox
  kExitUnreachable = 3,  // the sandbox exists but its agent is dead or does not answer
  kExitWaitTimedOut = 124,  // `wait --timeout` ran out before the job finished
};

// Options every command accepts.
struct Global {
  bool json = false;
};

// Accepts the options named in with_value (each takes a value) and in
// flags ("--json" and "--help"/"-h" always). Errors name the offending argument.
Result<Args> parse_args(const std::vector<std::string>& args, const std::set<std::string>& with_value,
                        const std::set<std::string>& flag_names, size_t stop_after = 0);

// Prints "gpubox COMMAND: MESSAGE" to stderr, or with --json {"error":
// {"code", "message", "exit_code"}} to stdout; returns code. The message is
// put in the CLI's words first (in_cli_words). `code` in the JSON is the
// agent's error code when MESSAGE starts with one ("not_found: ..."), else
// usage / failed / unreachable.
int fail(const std::string& command, const std::string& message, int code);
// The same for a Status: its message for people, its code in the JSON.
int fail(const std::string& command, const Status& status, int code);
// A mistake in a command's own arguments: fail(command, ..., kExitUsage),
// and without --json a second line that says where the usage is, "See
// 'gpubox COMMAND --help'." (as docker does: not the usage itself).
int fail_usage(const std::string& command, const std::string& message);
int fail_usage(const std::string& command, const Status& status);
// A budget's refusal or error (host/budget/): budget_exceeded (exit 1, that code in the JSON) for a
// ceiling, a usage error (exit 2) for bad input (an unknown budget, a missing price), else failed.
int fail_budget(const std::string& command, const Status& status);
// Errors as JSON on stdout from now on (main sets it when --json is given).
void set_json_errors(bool on);
// An agent's message in the CLI's words: RPC methods it names become the
// gpubox commands that do the same (job.list -> `gpubox jobs ID`, sys.info ->
// `gpubox info ID`, ...), params.job_id becomes JOB.
std::string in_cli_words(const std::string& message);
// Prints a command's usage to stdout (for --help); returns kExitOk.
int show_usage(const char* usage);
// The exit code for a Status from finding or reaching a sandbox.
int exit_code_for(const Status& status);

// Opens the store and resolves ID_OR_NAME.
Result<SandboxRecord> find_sandbox(const std::string& id_or_name);
// find_sandbox, with the state of a sandbox whose backend has a control plane
// read from it first (a warning naming `gpubox COMMAND` on stderr when it cannot be read).
Result<SandboxRecord> find_sandbox_with_state(const std::string& command, const std::string& id_or_name);
// Connects to a sandbox's agent; unavailable when it is dead or does not answer.
Result<std::unique_ptr<rpc::Client>> connect_sandbox(const SandboxRecord& record);

// Remote paths: a relative one is taken from the sandbox's work dir.
std::string remote_path(const std::string& path);

int run_create(const std::vector<std::string>& args, const Global& global);
int run_ls(const std::vector<std::string>& args, const Global& global);
int run_info(const std::vector<std::string>& args, const Global& global);
int run_exec(const std::vector<std::string>& args, const Global& global);
int run_put(const std::vector<std::string>& args, const Global& global);
int run_get(const std::vector<std::string>& args, const Global& global);
int run_logs(const std::vector<std::string>& args, const Global& global);
// `gpubox logs ID [-f]` where the agent's log is inside the sandbox (AgentLogSource::through_agent): read through fs.read.
int print_remote_agent_log(SandboxRecord& record, bool follow);
int run_terminate(const std::vector<std::string>& args, const Global& global);
int run_submit(const std::vector<std::string>& args, const Global& global);
int run_jobs(const std::vector<std::string>& args, const Global& global);
int run_wait(const std::vector<std::string>& args, const Global& global);
int run_cancel(const std::vector<std::string>& args, const Global& global);
int run_result(const std::vector<std::string>& args, const Global& global);
int run_run_code(const std::vector<std::string>& args, const Global& global);
int run_attach(const std::vector<std::string>& args, const Global& global);
int run_kernelspec(const std::vector<std::string>& args, const Global& global);
int run_snapshot(const std::vector<std::string>& args, const Global& global);
int run_snapshots(const std::vector<std::string>& args, const Global& global);
// `gpubox create` from its arguments; with `from`, the new sandbox gets the snapshot's files.
int create_sandbox(const std::vector<std::string>& args, const Global& global, const Snapshot* from);
// `gpubox create --from-snapshot N …`: the snapshot's own create flags, then the given ones (they win).
int run_create_from_snapshot(const std::vector<std::string>& args, const Global& global);
int run_rpc(const std::vector<std::string>& args, const Global& global);
// `gpubox model ID ls|info|tokenize|generate|load|unload`: the sandbox's model host.
int run_model(const std::vector<std::string>& args, const Global& global);
// `gpubox model ID pull REPO --volume NAME`: args parsed by run_model (host/cli/model_pull.cpp).
int run_model_pull(const Args& args, const Global& global);
// `gpubox weights FILE|DIR`: a safetensors file's or model directory's tensors, with no sandbox.
int run_weights(const std::vector<std::string>& args, const Global& global);
// `gpubox mcp`: a stdio MCP server (host/mcp/, docs/mcp.md).
int run_mcp(const std::vector<std::string>& args, const Global& global);
// `gpubox adopt REMOTE_ID --keys FILE`: a control plane's sandbox created elsewhere, into this store (adopt.cpp).
int run_adopt(const std::vector<std::string>& args, const Global& global);
// adopt's entry of `gpubox --help`, for the first of these backends with a control plane (none: nullopt).
std::optional<HelpLine> adopt_help(const std::vector<const Backend*>& backends);
// `gpubox budget [init|set|default|log|reconcile]`: budgets, their reservations and journal (budget.cpp).
int run_budget(const std::vector<std::string>& args, const Global& global);
// `gpubox usage ID`: the agent's sys.usage beside the resources the sandbox was created with (usage.cpp).
int run_usage(const std::vector<std::string>& args, const Global& global);
// What a sandbox was created with, from its store record: cpu, memory_mib, timeout_s and
// enforced_by, and what its backend adds (Backend::add_requested: gpu and region, or pids, idle_timeout_s and gpus).
nlohmann::json requested_resources(const SandboxRecord& record);
// sys.usage of the sandbox's agent (unknown_method, said plainly, for an agent that predates it).
Result<nlohmann::json> sandbox_usage(rpc::Client& client);
// The usage as `gpubox usage` prints it: container, cpu, memory, gpus, then a row per job.
void print_usage_table(const nlohmann::json& usage);
// "requested:   gpu 2 x H100, cpu 4, memory 8192 MiB, timeout 3600 s, region any".
void print_requested(const nlohmann::json& requested);
// `gpubox logs ID JOB`: args already parsed by run_logs, with two positionals.
int run_job_logs(const Args& args, const Global& global);

}  // namespace gpubox::host::cli
