// gpubox: the host-side CLI. Parses the global options and the subcommand and
// hands over; the commands live in host/cli/.
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "base/terminal_text.h"
#include "base/version.h"
#include "host/cli/cli.h"
#include <nlohmann/json.hpp>

namespace {

constexpr char kUsage[] =
    "usage: gpubox [--json] COMMAND ...\n"
    "       gpubox [--json] --version          this gpubox's version and the agent protocol it speaks\n"
    "commands:\n"
    "  create [options]                   create a sandbox and print its id (gpubox create --help);\n"
    "                                     --backend local|podman|docker|modal, --from-snapshot NAME\n"
    "  ls                                 list sandboxes and their state (a dead one: how it ended)\n"
    "  info ID                            a sandbox's limits, state and agent\n"
    "  usage ID                           container, CPU and GPU seconds, GPU type, each job's wall and CPU\n"
    "                                     seconds, and the resources requested (to price a run)\n"
    "  budget [init|set|default|log|reconcile]\n"
    "                                     cost ceilings: each create, job and pull is reserved in a journal\n"
    "                                     before it is dispatched, refused past the ceiling (docs/budget.md)\n"
    "  exec ID [-i] [-t] [options] -- CMD ARGS...\n"
    "                                     run a command; its output streams here, its exit code is ours\n"
    "                                     (-i: forward stdin; -t: on a terminal; -it ID bash: a shell)\n"
    "  put ID LOCAL REMOTE [--parents]    copy a file or directory into the sandbox\n"
    "  get ID REMOTE LOCAL                copy a file or directory out of the sandbox\n"
    "  rpc ID|ENDPOINT METHOD [JSON|-]    call one RPC method of an agent and print the result (- : JSON from stdin)\n"
    "  logs ID [-f]                       print (and follow) the agent's log\n"
    "  submit ID [options] -- COMMAND     start a batch job (--input FILE|DIR); prints its id (gpubox submit --help)\n"
    "  jobs ID                            the sandbox's jobs and their state\n"
    "  wait ID JOB [--timeout S]          wait for a job; exit 0 if it succeeded, 1 if not, 124 if --timeout ran out\n"
    "  logs ID JOB [--stderr] [-f]        a job's stdout (or stderr), followed with -f\n"
    "  result ID JOB [--out DIR]          download and extract a finished job's outputs and logs\n"
    "  cancel ID JOB                      stop a job (its outputs are still staged)\n"
    "  run-code ID [CODE | -] [options]   run Python in the sandbox's kernel; images saved to files (gpubox run-code --help)\n"
    "  terminate ID... | --all            stop sandboxes and remove their state and their kernelspecs\n"
    "  snapshot ID [--name NAME]          a snapshot of a sandbox's files and settings (not its processes)\n"
    "  snapshots [rm NAME...]             list (or remove) snapshots\n"
    "  attach ID [--connection-file F]    serve the sandbox's Jupyter kernel to local frontends\n"
    "  kernelspec install|list|remove     Jupyter kernelspecs for the gpubox kernel (gpubox kernelspec --help)\n"
    "  model ID ls|info|tokenize|generate|load|unload ...\n"
    "                                     the sandbox's models: list, describe, tokenize, generate text\n"
    "                                     (gpubox model --help)\n"
    "  model ID pull REPO --volume NAME   download a Hugging Face repository into a volume, in a job\n"
    "  weights FILE|DIR [--tensor NAME [--indices I...]]\n"
    "                                     a safetensors file's (or model directory's) tensors and sha256s, or\n"
    "                                     values; no sandbox needed, nothing in the file is run\n"
    "  mcp [--sandbox ID] [--service NAME] an MCP server on stdio for AI agents (gpubox mcp --help, docs/mcp.md)\n"
    "  adopt MODAL_ID --keys FILE         record a Modal sandbox created elsewhere (gpubox adopt --help, docs/modal.md)\n"
    "ID is a sandbox's id, a unique prefix of it, or its name.\n"
    "--json: output for programs; errors too, as {\"error\": {\"code\", \"message\", ...}} on stdout.\n"
    "exit codes: 0 ok, 1 the remote command or call failed, 2 usage or config error (or unknown sandbox),\n"
    "            3 sandbox not reachable, 124 wait --timeout ran out; exec exits with the command's own code.\n";

}  // namespace

int main(int argc, char** argv) {
  using namespace gpubox::host::cli;
  std::vector<std::string> args(argv + 1, argv + argc);
  Global global;
  while (!args.empty() && args[0] == "--json") {
    global.json = true;
    args.erase(args.begin());
  }
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    std::fputs(kUsage, args.empty() ? stderr : stdout);
    return args.empty() ? kExitUsage : kExitOk;
  }
  if (args[0] == "--version") {
    if (global.json) {
      std::printf("%s\n", nlohmann::json{{"version", gpubox::kVersion}, {"protocol_version", gpubox::kProtocolVersion}}.dump().c_str());
    } else {
      std::printf("gpubox %s (agent protocol %d)\n", gpubox::kVersion, gpubox::kProtocolVersion);
    }
    return kExitOk;
  }
  std::string command = args[0];
  args.erase(args.begin());
  // --json after the command (before its --) also makes errors JSON.
  for (const auto& arg : args) {
    if (arg == "--") break;
    if (arg == "--json") global.json = true;
  }
  set_json_errors(global.json);
  // Exceptions stop here: a bug must still end with a message and an exit code.
  try {
    if (command == "rpc") return run_rpc(args, global);
    if (command == "create") return run_create(args, global);
    if (command == "ls" || command == "list") return run_ls(args, global);
    if (command == "info") return run_info(args, global);
    if (command == "usage") return run_usage(args, global);
    if (command == "budget") return run_budget(args, global);
    if (command == "exec") return run_exec(args, global);
    if (command == "put") return run_put(args, global);
    if (command == "get") return run_get(args, global);
    if (command == "logs") return run_logs(args, global);
    if (command == "terminate" || command == "rm") return run_terminate(args, global);
    if (command == "submit") return run_submit(args, global);
    if (command == "jobs") return run_jobs(args, global);
    if (command == "wait") return run_wait(args, global);
    if (command == "result") return run_result(args, global);
    if (command == "cancel") return run_cancel(args, global);
    if (command == "attach") return run_attach(args, global);
    if (command == "kernelspec") return run_kernelspec(args, global);
    if (command == "run-code") return run_run_code(args, global);
    if (command == "snapshot") return run_snapshot(args, global);
    if (command == "snapshots") return run_snapshots(args, global);
    if (command == "weights") return run_weights(args, global);
    if (command == "model") return run_model(args, global);
    if (command == "mcp") return run_mcp(args, global);
    if (command == "adopt") return run_adopt(args, global);
  } catch (const std::exception& e) {
    return fail(command, std::string("internal error: ") + e.what(), kExitFailed);
  }
  // One line and where the list is (a typo should not scroll 43 lines of usage past).
  std::string unknown = "unknown command '" + command + "' (see gpubox --help)";
  if (global.json) return fail(command, unknown, kExitUsage);
  std::fprintf(stderr, "gpubox: %s\n", gpubox::escape_for_terminal(unknown).c_str());  // what was typed acts on nothing
  return kExitUsage;
}
