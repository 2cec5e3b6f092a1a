#include "agent/jobs/job_spec.h"

#include <fnmatch.h>

#include "rpc/params.h"
#include "base/sha256.h"

namespace gpubox::jobs {
namespace {

using nlohmann::json;

constexpr std::size_t kMaxInputs = 1000;
constexpr std::size_t kMaxOutputs = 256;
constexpr std::size_t kMaxCommandBytes = 256 * 1024;
constexpr std::size_t kMaxIntentBytes = 16 * 1024;

Status invalid(const std::string& field, const std::string& expected, const json& got) {
  std::string shown = got.dump();
  if (shown.size() > 80) shown = shown.substr(0, 77) + "...";
  return Status(ErrorCode::invalid_request, "params." + field + ": expected " + expected + ", got " + shown);
}

bool is_env_name(const std::string& name) {
  if (name.empty() || std::isdigit(static_cast<unsigned char>(name[0]))) return false;
  for (char c : name) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
  }
  return true;
}

Result<std::vector<InputFile>> parse_inputs(const json& list) {
  if (!list.is_array()) return invalid("inputs", "an array of {name, sha256, size}", list);
  if (list.size() > kMaxInputs) return invalid("inputs", "at most " + std::to_string(kMaxInputs) + " inputs", list.size());
  std::vector<InputFile> inputs;
  for (std::size_t i = 0; i < list.size(); ++i) {
    const json& item = list[i];
    std::string at = "inputs[" + std::to_string(i) + "]";
    if (!item.is_object()) return invalid(at, "an object {name, sha256, size}", item);
    rpc::ParamReader reader(item);
    auto name = reader.string("name", true);
    auto sha256 = reader.string("sha256", true);
    auto size = reader.integer("size", 0, std::numeric_limits<std::int64_t>::max(), true);
    auto kind = reader.string("kind");
    if (Status status = reader.finish(); !status) {
      return Status(status.code(), "params." + at + "." + status.message().substr(status.message().find('.') + 1));
    }
    if (!is_bare_file_name(*name)) {
      return invalid(at + ".name", "a bare file name (no '/', not '.' or '..'; the job's work dir holds it)", *name);
    }
    if (!normalize_sha256_hex(*sha256)) return invalid(at + ".sha256", "64 hex digits", *sha256);
    for (const auto& earlier : inputs) {
      if (earlier.name == *name) return invalid(at + ".name", "a name no other input has", *name);
    }
    if (kind && *kind != "file" && *kind != "dir") return invalid(at + ".kind", "\"file\" or \"dir\"", *kind);
    inputs.push_back({*name, *sha256, static_cast<std::uint64_t>(*size), kind.value_or("file") == "dir"});
  }
  return inputs;
}

Result<std::vector<OutputRule>> parse_outputs(const json& list) {
  if (!list.is_array()) return invalid("outputs", "an array of {glob, kind: \"featured\"|\"hidden\"}", list);
  if (list.size() > kMaxOutputs) return invalid("outputs", "at most " + std::to_string(kMaxOutputs) + " rules", list.size());
  std::vector<OutputRule> rules;
  for (std::size_t i = 0; i < list.size(); ++i) {
    const json& item = list[i];
    std::string at = "outputs[" + std::to_string(i) + "]";
    if (!item.is_object()) return invalid(at, "an object {glob, kind}", item);
    const json* glob = item.contains("glob") ? &item["glob"] : nullptr;
    if (!glob || !glob->is_string() || glob->get<std::string>().empty()) {
      return invalid(at + ".glob", "a non-empty glob relative to out/", glob ? *glob : json());
    }
    OutputRule rule{glob->get<std::string>(), true};
    if (item.contains("kind")) {
      const json& kind = item["kind"];
      if (kind == "featured") rule.featured = true;
      else if (kind == "hidden") rule.featured = false;
      else return invalid(at + ".kind", "\"featured\" or \"hidden\"", kind);
    }
    for (const auto& [key, value] : item.items()) {
      if (key != "glob" && key != "kind") return Status(ErrorCode::invalid_request, "params." + at + "." + key + ": unknown field");
    }
    rules.push_back(std::move(rule));
  }
  return rules;
}

}  // namespace

bool is_bare_file_name(const std::string& name) {
  if (name.empty() || name == "." || name == ".." || name == "out" || name.size() > 255) return false;
  for (char c : name) {
    if (c == '/' || c == '\0') return false;
  }
  return true;
}

bool glob_matches(const std::string& glob, const std::string& relative_path) {
  return ::fnmatch(glob.c_str(), relative_path.c_str(), FNM_PATHNAME | FNM_PERIOD) == 0;
}

json JobSpec::to_json() const {
  json value = {{"command", command}, {"env", env}, {"intent", intent}};
  value["inputs"] = json::array();
  for (const auto& input : inputs) {
    value["inputs"].push_back({{"name", input.name}, {"sha256", input.sha256}, {"size", input.size},
                               {"kind", input.directory ? "dir" : "file"}});
  }
  value["outputs"] = json::array();
  for (const auto& rule : outputs) value["outputs"].push_back({{"glob", rule.glob}, {"kind", rule.featured ? "featured" : "hidden"}});
  value["timeout_s"] = timeout_s ? json(*timeout_s) : json();
  value["memory_limit_bytes"] = memory_limit_bytes ? json(*memory_limit_bytes) : json();
  return value;
}

JobSpec job_spec_from_json(const json& value) {
  JobSpec spec;
  spec.command = value.value("command", "");
  spec.intent = value.value("intent", "");
  if (value.contains("env") && value["env"].is_object()) spec.env = value["env"].get<std::map<std::string, std::string>>();
  if (value.contains("inputs") && value["inputs"].is_array()) {
    for (const auto& input : value["inputs"]) {
      spec.inputs.push_back({input.value("name", ""), input.value("sha256", ""), input.value("size", std::uint64_t{0}),
                             input.value("kind", "file") == "dir"});
    }
  }
  if (value.contains("outputs") && value["outputs"].is_array()) {
    for (const auto& rule : value["outputs"]) spec.outputs.push_back({rule.value("glob", ""), rule.value("kind", "") != "hidden"});
  }
  if (value.contains("timeout_s") && value["timeout_s"].is_number()) spec.timeout_s = value["timeout_s"].get<double>();
  if (value.contains("memory_limit_bytes") && value["memory_limit_bytes"].is_number_unsigned()) {
    spec.memory_limit_bytes = value["memory_limit_bytes"].get<std::uint64_t>();
  }
  return spec;
}

Result<JobSpec> parse_job_spec(const json& params) {
  if (!params.is_object()) return invalid("", "an object", params);
  rpc::ParamReader reader(params);
  auto command = reader.string("command", true);
  const json* inputs = reader.raw("inputs");
  auto env = reader.string_map("env");
  auto secrets = reader.string_map("secrets");
  auto timeout = reader.number("timeout_seconds", 0.001, 7 * 86400.0);
  const json* outputs = reader.raw("outputs");
  auto intent = reader.string("intent");
  auto memory = reader.integer("memory_limit_bytes", 1 << 20, std::numeric_limits<std::int64_t>::max());
  if (Status status = reader.finish(); !status) return status;
  JobSpec spec;
  if (command->empty() || command->size() > kMaxCommandBytes || command->find('\0') != std::string::npos) {
    return invalid("command", "a non-empty shell command without NUL bytes, at most 256 KiB", command->substr(0, 80));
  }
  spec.command = *command;
  if (inputs) {
    auto parsed = parse_inputs(*inputs);
    if (!parsed) return parsed.status();
    spec.inputs = std::move(*parsed);
  }
  if (env) {
    for (const auto& [name, value] : *env) {
      if (!is_env_name(name)) return invalid("env", "names matching [A-Za-z_][A-Za-z0-9_]*", name);
      if (value.find('\0') != std::string::npos) return invalid("env." + name, "a value without NUL bytes", "…");
    }
    spec.env = std::move(*env);
  }
  if (secrets) {
    for (const auto& [name, value] : *secrets) {
      if (!is_env_name(name)) return invalid("secrets", "names matching [A-Za-z_][A-Za-z0-9_]*", name);
      if (value.find('\0') != std::string::npos) return invalid("secrets." + name, "a value without NUL bytes", "…");
    }
    spec.secrets = std::move(*secrets);
  }
  spec.timeout_s = timeout;
  if (outputs) {
    auto parsed = parse_outputs(*outputs);
    if (!parsed) return parsed.status();
    spec.outputs = std::move(*parsed);
  }
  if (intent) {
    if (intent->size() > kMaxIntentBytes) return invalid("intent", "at most 16 KiB of text", intent->size());
    spec.intent = *intent;
  }
  if (memory) spec.memory_limit_bytes = static_cast<std::uint64_t>(*memory);
  return spec;
}

}  // namespace gpubox::jobs
