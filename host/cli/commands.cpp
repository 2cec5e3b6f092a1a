#include "host/cli/commands.h"

#include <algorithm>

#include "host/backends/registry.h"
#include "host/cli/create_usage.h"

namespace gpubox::host::cli {

const std::vector<Command>& commands() {
  static const std::vector<Command> table = [] {
    std::vector<Command> rows = {
        {{"create"}, run_create, {create_help(all_backends())}},
        {{"ls", "list"}, run_ls, {{"ls", "list sandboxes and their state (a dead one: how it ended)"}}},
        {{"info"}, run_info, {{"info ID", "a sandbox's limits, state and agent"}}},
        {{"usage"}, run_usage,
         {{"usage ID", "container, CPU and GPU seconds, GPU type, each job's wall and CPU\n"
                       "seconds, and the resources requested (to price a run)"}}},
        {{"budget"}, run_budget,
         {{"budget [init|set|default|log|reconcile]",
           "cost ceilings: each create, job and pull is reserved in a journal\n"
           "before it is dispatched, refused past the ceiling (docs/budget.md)"}}},
        {{"exec"}, run_exec,
         {{"exec ID [-i] [-t] [options] -- CMD ARGS...",
           "run a command; its output streams here, its exit code is ours\n"
           "(-i: forward stdin; -t: on a terminal; -it ID bash: a shell)"}}},
        {{"put"}, run_put, {{"put ID LOCAL REMOTE [--parents]", "copy a file or directory into the sandbox"}}},
        {{"get"}, run_get, {{"get ID REMOTE LOCAL", "copy a file or directory out of the sandbox"}}},
        {{"rpc"}, run_rpc,
         {{"rpc ID|ENDPOINT METHOD [JSON|-]", "call one RPC method of an agent and print the result (- : JSON from stdin)"}}},
        {{"logs"}, run_logs,
         {{"logs ID [-f]", "print (and follow) the agent's log"},
          {"logs ID JOB [--stderr] [-f]", "a job's stdout (or stderr), followed with -f"}}},
        {{"submit"}, run_submit,
         {{"submit ID [options] -- COMMAND", "start a batch job (--input FILE|DIR); prints its id (gpubox submit --help)"}}},
        {{"jobs"}, run_jobs, {{"jobs ID", "the sandbox's jobs and their state"}}},
        {{"wait"}, run_wait,
         {{"wait ID JOB [--timeout S]", "wait for a job; exit 0 if it succeeded, 1 if not, 124 if --timeout ran out"}}},
        {{"result"}, run_result, {{"result ID JOB [--out DIR]", "download and extract a finished job's outputs and logs"}}},
        {{"cancel"}, run_cancel, {{"cancel ID JOB", "stop a job (its outputs are still staged)"}}},
        {{"run-code"}, run_run_code,
         {{"run-code ID [CODE | -] [options]", "run Python in the sandbox's kernel; images saved to files (gpubox run-code --help)"}}},
        {{"terminate", "rm"}, run_terminate,
         {{"terminate ID... | --all", "stop sandboxes and remove their state and their kernelspecs"}}},
        {{"snapshot"}, run_snapshot,
         {{"snapshot ID [--name NAME]", "a snapshot of a sandbox's files and settings (not its processes)"}}},
        {{"snapshots"}, run_snapshots, {{"snapshots [rm NAME...]", "list (or remove) snapshots"}}},
        {{"attach"}, run_attach, {{"attach ID [--connection-file F]", "serve the sandbox's Jupyter kernel to local frontends"}}},
        {{"kernelspec"}, run_kernelspec,
         {{"kernelspec install|list|remove", "Jupyter kernelspecs for the gpubox kernel (gpubox kernelspec --help)"}}},
        {{"model"}, run_model,
         {{"model ID ls|info|tokenize|generate|load|unload ...",
           "the sandbox's models: list, describe, tokenize, generate text\n(gpubox model --help)"},
          {"model ID pull REPO --volume NAME", "download a Hugging Face repository into a volume, in a job"}}},
        {{"weights"}, run_weights,
         {{"weights FILE|DIR [--tensor NAME [--indices I...]]",
           "a safetensors file's (or model directory's) tensors and sha256s, or\n"
           "values; no sandbox needed, nothing in the file is run"}}},
        {{"mcp"}, run_mcp,
         {{"mcp [--sandbox ID] [--service NAME]", "an MCP server on stdio for AI agents (gpubox mcp --help, docs/mcp.md)"}}},
        {{"adopt"}, run_adopt, {}},
    };
    // adopt speaks to a control plane; listed when this build has a backend with one.
    if (auto adopt = adopt_help(all_backends())) rows.back().help.push_back(*adopt);
    return rows;
  }();
  return table;
}

const Command* find_command(const std::string& name) {
  for (const Command& command : commands()) {
    if (std::find(command.names.begin(), command.names.end(), name) != command.names.end()) return &command;
  }
  return nullptr;
}

std::string top_usage() {
  std::vector<HelpLine> lines;
  for (const Command& command : commands()) lines.insert(lines.end(), command.help.begin(), command.help.end());
  return "usage: gpubox [--json] COMMAND ...\n"
         "       gpubox [--json] --version          this gpubox's version and the agent protocol it speaks\n"
         "commands:\n" +
         format_help(lines) +
         "ID is a sandbox's id, a unique prefix of it, or its name.\n"
         "--json: output for programs; errors too, as {\"error\": {\"code\", \"message\", ...}} on stdout.\n"
         "exit codes: 0 ok, 1 the remote command or call failed, 2 usage or config error (or unknown sandbox),\n"
         "            3 sandbox not reachable, 124 wait --timeout ran out; exec exits with the command's own code.\n";
}

}  // namespace gpubox::host::cli
