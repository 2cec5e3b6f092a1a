// `gpubox mcp [--sandbox ID|NAME] [--service NAME] [--notebook-dir DIR]`: a
// stdio MCP server for AI agents (host/mcp/, docs/mcp.md). stdout carries
// only MCP messages; logs go to stderr.
#include <signal.h>
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <cstdlib>

#include "host/cli/cli.h"
#include "host/mcp/server.h"
#include "host/mcp/tools.h"

namespace gpubox::host::cli {
namespace {

constexpr char kUsage[] =
    "usage: gpubox mcp [--sandbox ID|NAME] [--service NAME] [--notebook-dir DIR]\n"
    "  an MCP server on stdin/stdout (newline-delimited JSON-RPC) for AI agents: Claude Code, Claude Desktop,\n"
    "  Cursor, ... start it as a stdio server (docs/mcp.md). Protocol revisions 2025-11-25 (initialize, and the\n"
    "  handshake revisions before it) and 2026-07-28 (stateless: server/discover, the version in each request's _meta).\n"
    "  tools: create_sandbox list_sandboxes terminate_sandbox execute_code add_markdown exec read_file write_file\n"
    "         list_files gpu_status processes snapshot submit_job wait_job collect_job list_served call_served\n"
    "         tokenize generate run_model; each takes sandbox_id (an id, prefix or name) or session_id.\n"
    "  --sandbox       the sandbox a call without sandbox_id/session_id is about\n"
    "  --service       with --sandbox: the tools are exactly that served service's functions (serve.list)\n"
    "  --notebook-dir  where each session's notebook SESSION.ipynb is kept\n"
    "                  (default $XDG_STATE_HOME/gpubox/notebooks, else ~/.local/state/gpubox/notebooks)\n";

std::string state_home() {
  if (const char* xdg = std::getenv("XDG_STATE_HOME"); xdg && *xdg) return xdg;
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : "/tmp") + "/.local/state";
}

std::string self_path() {
  char path[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", path, sizeof path - 1);
  if (n <= 0) return "gpubox";
  path[n] = '\0';
  return path;
}

}  // namespace

int run_mcp(const std::vector<std::string>& raw, const Global&) {
  auto args = parse_args(raw, {"--sandbox", "--service", "--notebook-dir"}, {});
  if (!args) return fail_usage("mcp", args.status());
  if (args->flag("--help")) return show_usage(kUsage);
  if (!args->positional.empty() || args->has_double_dash) return fail_usage("mcp", "unexpected argument");
  auto sandbox = args->last("--sandbox");
  auto service = args->last("--service");
  if (service && !sandbox) return fail_usage("mcp", "--service needs --sandbox (the sandbox that serves it)");
  if (sandbox) {
    // Refused at start rather than at every call: the name must exist now.
    auto store = SandboxStore::open_default();
    if (!store) return fail("mcp", store.status(), kExitUsage);
    auto record = store->resolve(*sandbox);
    if (!record) return fail_usage("mcp", "--sandbox: " + record.status().message());
  }
  std::string state = state_home() + "/gpubox";
  std::string notebook_dir = args->last("--notebook-dir").value_or(state + "/notebooks");

  ::signal(SIGPIPE, SIG_IGN);  // a client that went away: writes fail, the reader sees end of input
  mcp::Sandboxes sandboxes(sandbox);
  mcp::Notebooks notebooks(notebook_dir);
  mcp::ToolEnv env{sandboxes, notebooks, self_path(), state + "/results"};
  std::unique_ptr<mcp::Toolbox> tools;
  mcp::ServerIdentity identity;
  identity.version = "0.1.0";
  if (service) {
    tools = mcp::service_toolbox(env, *sandbox, *service);
    identity.name = "gpubox-" + *service;
    identity.instructions = "The functions of the service '" + *service + "' served from gpubox sandbox " + *sandbox + ".";
  } else {
    tools = mcp::full_toolbox(env);
    identity.instructions =
        "gpubox: GPU sandboxes with a persistent Jupyter kernel. Create one with create_sandbox (or use the default "
        "sandbox), run Python with execute_code (state persists; images come back as images), shell commands with exec, "
        "files with read_file/write_file/list_files, long work with submit_job/wait_job/collect_job. Each session's "
        "cells are saved as a .ipynb notebook in " + notebook_dir + ".";
  }
  std::fprintf(stderr, "gpubox mcp: serving on stdio%s%s; notebooks in %s\n", sandbox ? (", sandbox " + *sandbox).c_str() : "",
               service ? (", service " + *service).c_str() : "", notebook_dir.c_str());
  mcp::Server server(*tools, identity, STDIN_FILENO, STDOUT_FILENO);
  return server.run();
}

}  // namespace gpubox::host::cli
