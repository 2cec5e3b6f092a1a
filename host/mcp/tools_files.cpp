// read_file, write_file, list_files (fs.*). Relative paths are taken from
// the sandbox's work dir (/workspace). Text comes back as text, other bytes
// as base64, png/jpeg files also as MCP image content.
#include "host/backends/backend.h"
#include "host/mcp/tools.h"
#include "base/base64.h"
#include "rpc/params.h"

namespace gpubox::mcp {
namespace {

constexpr std::uint64_t kMaxRead = 1 << 20;  // one RESULT body's worth; more is asked for with offset

std::string sandbox_path(const std::string& path) {
  if (!path.empty() && path[0] == '/') return path;
  if (path.empty() || path == ".") return host::kSandboxWorkDir;
  return std::string(host::kSandboxWorkDir) + "/" + (path.rfind("./", 0) == 0 ? path.substr(2) : path);
}

std::string image_type(const std::string& path) {
  auto ends = [&](const std::string& suffix) {
    return path.size() >= suffix.size() && path.compare(path.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  if (ends(".png")) return "image/png";
  if (ends(".jpg") || ends(".jpeg")) return "image/jpeg";
  return "";
}

ToolResult read_file(ToolEnv& env, const json& args) {
  std::string path = sandbox_path(args["path"].get<std::string>());
  auto stat = call_sandbox(env, args, "fs.stat", {{"path", path}});
  if (!stat) return ToolResult::from(stat.status());
  std::uint64_t offset = args.value("offset", 0ull);
  std::uint64_t length = std::min<std::uint64_t>(args.value("length", kMaxRead), kMaxRead);
  auto read = call_sandbox(env, args, "fs.read", {{"path", path}, {"offset", offset}, {"length", length}});
  if (!read) return ToolResult::from(read.status());
  std::string data = bytes_of((*read)["data"]);
  std::uint64_t size = stat->value("size", 0ull);
  ToolResult result;
  result.structured = {{"path", path}, {"size", size}, {"offset", offset}, {"bytes", data.size()},
                       {"truncated", offset + data.size() < size}};
  std::string mime = image_type(path);
  if (!mime.empty() && offset == 0 && data.size() == size) {
    result.structured["encoding"] = "image";
    result.content.push_back({{"type", "image"}, {"data", base64_encode(data)}, {"mimeType", mime}});
  } else if (is_utf8(data)) {
    result.structured["encoding"] = "utf-8";
    result.structured["content"] = data;
  } else {
    result.structured["encoding"] = "base64";
    result.structured["content"] = base64_encode(data);
  }
  return result;
}

ToolResult write_file(ToolEnv& env, const json& args) {
  std::string path = sandbox_path(args["path"].get<std::string>());
  std::string content = args["content"].get<std::string>();
  if (args.value("encoding", "utf-8") == "base64") {
    auto decoded = base64_decode(content);
    if (!decoded) return ToolResult::error("content: not valid base64");
    content = std::move(*decoded);
  }
  if (content.size() > (900u << 10)) return ToolResult::error("content: at most 900 KiB per write_file call");
  json params = {{"path", path}, {"data", rpc::binary(content)}, {"parents", args.value("parents", true)}};
  if (args.contains("mode")) params["mode"] = args["mode"];
  auto written = call_sandbox(env, args, "fs.write", params);
  if (!written) return ToolResult::from(written.status());
  ToolResult result;
  result.structured = {{"path", path}, {"size", (*written)["size"]}, {"sha256", (*written)["sha256"]}};
  return result;
}

ToolResult list_files(ToolEnv& env, const json& args) {
  std::string path = sandbox_path(args.value("path", std::string(".")));
  auto listed = call_sandbox(env, args, "fs.list", {{"path", path}, {"depth", args.value("depth", 1)}});
  if (!listed) return ToolResult::from(listed.status());
  ToolResult result;
  result.structured = {{"path", path}, {"entries", (*listed)["entries"]}, {"truncated", listed->value("truncated", false)}};
  return result;
}

}  // namespace

void add_file_tools(ToolRegistry& tools, ToolEnv& env) {
  json path = {{"type", "string"}, {"description", "a path in the sandbox; relative ones are under /workspace"}};
  tools.add({"read_file", "Read a file in the sandbox (up to 1 MiB per call: text, base64 for binary, png/jpeg as an image).",
             tool_schema({{"path", path},
                          {"offset", {{"type", "integer"}, {"minimum", 0}}},
                          {"length", {{"type", "integer"}, {"minimum", 0}}}},
                         {"path"})},
            [&env](const json& args, ToolCallContext&) { return read_file(env, args); });
  tools.add({"write_file", "Write a file in the sandbox (atomically; parent directories created).",
             tool_schema({{"path", path},
                          {"content", {{"type", "string"}}},
                          {"encoding", {{"type", "string"}, {"enum", {"utf-8", "base64"}}}},
                          {"parents", {{"type", "boolean"}}},
                          {"mode", {{"type", "integer"}, {"minimum", 0}, {"maximum", 4095}}}},
                         {"path", "content"})},
            [&env](const json& args, ToolCallContext&) { return write_file(env, args); });
  tools.add({"list_files", "List a directory in the sandbox (type, size, mode, mtime of each entry).",
             tool_schema({{"path", path}, {"depth", {{"type", "integer"}, {"minimum", 1}, {"maximum", 256}}}})},
            [&env](const json& args, ToolCallContext&) { return list_files(env, args); });
}

}  // namespace gpubox::mcp
