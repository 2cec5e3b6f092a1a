// execute_code and add_markdown: cells in the sandbox's Jupyter kernel
// (kernel.execute), recorded in the session's notebook. A cancelled call
// interrupts its cell (kernel.interrupt); progress notifications go out
// whenever output arrives and every 5 s of a quiet cell.
#include <chrono>

#include "host/mcp/tools.h"
#include "host/process_identity.h"
#include "rpc/client.h"

namespace gpubox::mcp {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kKeepalive = std::chrono::seconds(5);
// Each stream's text in the tool result stops here (the notebook keeps it all): a model reads the start.
constexpr std::size_t kMaxStreamText = 256 << 10;

// The session a call is in: session_id, else the sandbox's default session (its id).
struct Session {
  std::string id;
  host::SandboxRecord sandbox;
};

Result<Session> open_session(ToolEnv& env, const json& args) {
  auto record = env.sandboxes.resolve(args);
  if (!record) return record.status();
  std::string id = args.contains("session_id") ? args["session_id"].get<std::string>() : record->id;
  if (auto bound = env.sandboxes.session_sandbox(id); bound && *bound != record->id) {
    return Status(ErrorCode::invalid_request, "session_id '" + id + "' belongs to sandbox " + *bound + ", not " + record->id);
  }
  env.sandboxes.bind_session(id, record->id);
  return Session{id, std::move(*record)};
}

// What the cell showed, gathered for the tool result as its items arrive.
struct CellView {
  CellOutputs notebook;
  std::string stdout_text, stderr_text;
  json results = json::array();
  json images = json::array();  // MCP image content blocks
  json error;

  void add(const json& item) {
    notebook.add(item);
    if (item.contains("stream")) {
      std::string& text = item.value("stream", "stdout") == "stderr" ? stderr_text : stdout_text;
      if (text.size() < kMaxStreamText) {
        text += item.value("text", "");
        if (text.size() >= kMaxStreamText) {
          text.resize(kMaxStreamText);
          text += "\n[output truncated at 256 KiB here; the notebook has all of it]\n";
        }
      }
      return;
    }
    std::string kind = item.value("kind", "");
    if (kind == "display" || kind == "execute_result") {
      const json data = item.contains("data") && item["data"].is_object() ? item["data"] : json::object();
      for (const char* mime : {"image/png", "image/jpeg"}) {
        if (data.contains(mime) && data[mime].is_string()) {
          images.push_back({{"type", "image"}, {"data", data[mime]}, {"mimeType", mime}});
          return;
        }
      }
      if (data.contains("text/plain") && data["text/plain"].is_string()) results.push_back(data["text/plain"]);
    } else if (kind == "error") {
      error = item;
    }
  }
};

json clean_traceback(const json& traceback) {
  json lines = json::array();
  if (traceback.is_array()) {
    for (const auto& line : traceback) {
      if (line.is_string()) lines.push_back(strip_ansi(line.get<std::string>()));
    }
  }
  return lines;
}

ToolResult execute(ToolEnv& env, const json& args, ToolCallContext& context) {
  auto session = open_session(env, args);
  if (!session) return ToolResult::from(session.status());
  auto lease = env.sandboxes.connect(session->sandbox);
  if (!lease) return ToolResult::from(lease.status());
  rpc::Client& client = **lease;
  const std::string code = args["code"].get<std::string>();
  json params = {{"code", code}};
  if (args.contains("timeout")) params["timeout_s"] = args["timeout"];

  std::vector<zmq::message_t> attachments;
  if (code.size() > (256u << 10)) {  // beyond the body limit's comfort: the code as the CALL's attachment
    attachments.emplace_back(code.data(), code.size());
    params.erase("code");
  }
  auto opened = client.stream("kernel.execute", params, {.attachments = &attachments});
  if (!opened) {
    lease->discard();
    return ToolResult::from(opened.status());
  }
  rpc::Stream& cell = **opened;
  // The stream goes before its client does.
  auto drop_client = [&] {
    opened->reset();
    lease->discard();
  };
  CellView view;
  bool interrupted = false;
  Clock::time_point interrupted_at;
  auto started = Clock::now(), last_progress = started;
  while (true) {
    if (context.cancelled() && !interrupted) {
      interrupted = true;
      interrupted_at = Clock::now();
      (void)client.call("kernel.interrupt", json::object(), {.wait = std::chrono::milliseconds(5000)});
    }
    if (interrupted && Clock::now() - interrupted_at > std::chrono::seconds(10)) {
      // A cell that ignores the interrupt: stop waiting; CANCEL makes the agent interrupt it again.
      (void)cell.cancel();
      drop_client();
      return ToolResult::error("the cell ignored the interrupt and was cancelled");
    }
    if (Clock::now() - last_progress >= kKeepalive) {
      last_progress = Clock::now();
      auto seconds = std::chrono::duration_cast<std::chrono::seconds>(last_progress - started).count();
      context.progress("running for " + std::to_string(seconds) + " s");
    }
    auto got = cell.next_within(std::chrono::milliseconds(200));
    if (!got) {
      drop_client();
      return ToolResult::from(got.status());
    }
    if (got->has_value()) {
      view.add((*got)->body);
      last_progress = Clock::now();
      context.progress("output");
      continue;
    }
    if (cell.ended()) break;
    if (!host::process_alive(session->sandbox.agent)) {
      drop_client();
      return ToolResult::error("the sandbox's agent ended while the cell ran");
    }
  }
  const Result<json>& final_result = cell.result();
  if (!final_result) return ToolResult::from(final_result.status());
  const json& result = final_result.value();
  bool ok = result.value("status", "error") == "ok";
  if (!ok && view.error.is_null()) {
    view.error = result;
    view.notebook.add_error(result.value("ename", "Error"), result.value("evalue", ""), result.value("traceback", json::array()));
  }
  json execution_count = result.contains("execution_count") ? result["execution_count"] : json();
  json outputs = view.notebook.outputs();
  for (auto& output : outputs) {
    if (output["output_type"] == "execute_result") output["execution_count"] = execution_count;
  }
  auto path = env.notebooks.add_code_cell(session->id, session->sandbox.id, code, outputs, execution_count);

  ToolResult tool;
  tool.is_error = !ok;
  tool.structured = {{"status", ok ? "ok" : "error"}, {"execution_count", execution_count}, {"stdout", view.stdout_text},
                     {"stderr", view.stderr_text}, {"results", view.results}, {"images", view.images.size()},
                     {"session_id", session->id}, {"sandbox_id", session->sandbox.id}};
  if (!view.error.is_null()) {
    tool.structured["error"] = {{"ename", view.error.value("ename", "")}, {"evalue", view.error.value("evalue", "")},
                                {"traceback", clean_traceback(view.error.value("traceback", json::array()))}};
  }
  for (const char* flag : {"died", "timed_out"}) {
    if (result.contains(flag)) tool.structured[flag] = result[flag];
  }
  if (interrupted) tool.structured["interrupted"] = true;
  if (path) {
    tool.structured["notebook"] = *path;
  } else {
    tool.structured["notebook_error"] = path.status().message();
  }
  tool.content = view.images;
  return tool;
}

ToolResult add_markdown(ToolEnv& env, const json& args) {
  auto session = open_session(env, args);
  if (!session) return ToolResult::from(session.status());
  auto path = env.notebooks.add_markdown_cell(session->id, session->sandbox.id, args["text"].get<std::string>());
  if (!path) return ToolResult::from(path.status());
  ToolResult result;
  result.structured = {{"session_id", session->id}, {"notebook", *path}};
  return result;
}

}  // namespace

void add_kernel_tools(ToolRegistry& tools, ToolEnv& env) {
  tools.add({"execute_code",
             "Run Python in the sandbox's Jupyter kernel (state persists between calls, like a notebook). Returns stdout, "
             "stderr, results, errors with their traceback, and images; the cell is saved in the session's .ipynb notebook.",
             tool_schema({{"code", {{"type", "string"}, {"description", "the Python cell"}}},
                          {"timeout", {{"type", "number"}, {"minimum", 0.001}, {"description", "interrupt the cell after this many seconds"}}}},
                         {"code"})},
            [&env](const json& args, ToolCallContext& context) { return execute(env, args, context); });
  tools.add({"add_markdown", "Add a markdown cell (notes, findings) to the session's notebook.",
             tool_schema({{"text", {{"type", "string"}, {"description", "Markdown"}}}}, {"text"})},
            [&env](const json& args, ToolCallContext&) { return add_markdown(env, args); });
}

}  // namespace gpubox::mcp
