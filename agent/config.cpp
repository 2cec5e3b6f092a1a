// Over 600 lines: the config document's one strict reader, section by section, and its writer (--check-config), which must stay side by side.
#include "agent/config.h"

#include "base/base64.h"
#include "rpc/keys.h"

#include <cmath>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>

namespace gpubox {
namespace {

using nlohmann::json;

// Thrown inside this file only; parse_config turns it into a Status.
struct ConfigError {
  std::string message;
};

// dump() recurses once per nesting level: a deep enough value would overflow
// the stack, so describe() shows anything nested deeper than this as [...] or {...}.
bool shallow(const json& value, int levels_left) {
  if (!value.is_structured()) return true;
  if (levels_left == 0) return false;
  for (const auto& item : value) {
    if (!shallow(item, levels_left - 1)) return false;
  }
  return true;
}

std::string describe(const json& value) {
  if (!shallow(value, 16)) return value.is_array() ? "[...]" : "{...}";
  std::string text = value.dump(-1, ' ', false, json::error_handler_t::replace);
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return text;
}

[[noreturn]] void fail(const std::string& path, const std::string& expected, const json& got) {
  throw ConfigError{path + ": expected " + expected + ", got " + describe(got)};
}

// Reads the keys of one JSON object; remembers which were read so that
// finish() can refuse any key the schema does not know.
class ObjectReader {
 public:
  ObjectReader(const json& object, std::string path) : object_(object), path_(std::move(path)) {
    if (!object_.is_object()) fail(display_path(), "an object", object_);
  }

  std::string child_path(std::string_view key) const {
    return path_.empty() ? std::string(key) : path_ + "." + std::string(key);
  }

  const json* find(std::string_view key) {
    known_.insert(std::string(key));
    auto it = object_.find(key);
    return it == object_.end() ? nullptr : &*it;
  }

  void string(std::string_view key, std::string* out) {
    if (const json* v = find(key)) {
      if (!v->is_string()) fail(child_path(key), "a string", *v);
      *out = v->get<std::string>();
    }
  }

  void boolean(std::string_view key, bool* out) {
    if (const json* v = find(key)) {
      if (!v->is_boolean()) fail(child_path(key), "true or false", *v);
      *out = v->get<bool>();
    }
  }

  void integer(std::string_view key, long long min, long long max, int* out) {
    if (const json* v = find(key)) {
      if (!v->is_number_integer() || v->get<long long>() < min || v->get<long long>() > max) {
        fail(child_path(key), "an integer from " + std::to_string(min) + " to " + std::to_string(max), *v);
      }
      *out = static_cast<int>(v->get<long long>());
    }
  }

  void milliseconds(std::string_view key, double scale_to_ms, double min, double max,
                    std::chrono::milliseconds* out) {
    if (const json* v = find(key)) {
      if (!v->is_number() || v->get<double>() < min || v->get<double>() > max) {
        fail(child_path(key), "a number from " + trim(min) + " to " + trim(max), *v);
      }
      // Rounded, not truncated: 1.001 * 1000 is 1000.9999999999999 in binary floating point.
      *out = std::chrono::milliseconds(std::llround(v->get<double>() * scale_to_ms));
    }
  }

  void string_map(std::string_view key, std::map<std::string, std::string>* out) {
    if (const json* v = find(key)) {
      std::string path = child_path(key);
      if (!v->is_object()) fail(path, "an object of strings", *v);
      for (const auto& [name, value] : v->items()) {
        if (!value.is_string()) fail(path + "." + name, "a string", value);
        (*out)[name] = value.get<std::string>();
      }
    }
  }

  void finish() const {
    for (const auto& [key, value] : object_.items()) {
      if (!known_.count(key)) throw ConfigError{child_path(key) + ": unknown key"};
    }
  }

  std::string display_path() const { return path_.empty() ? "config" : path_; }

 private:
  static std::string trim(double number) {
    std::string text = std::to_string(number);
    text.erase(text.find_last_not_of('0') + 1);
    if (!text.empty() && text.back() == '.') text.pop_back();
    return text;
  }

  const json& object_;
  std::string path_;
  std::set<std::string> known_;
};

// [A-Za-z_][A-Za-z0-9_]*, by hand: std::regex recurses once per character and
// overflows the stack on names some tens of thousands of bytes long.
bool is_env_name(const std::string& name) {
  if (name.empty() || (name[0] >= '0' && name[0] <= '9')) return false;
  for (char c : name) {
    if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) return false;
  }
  return true;
}

void check_env_names(const std::map<std::string, std::string>& env, const std::string& path) {
  for (const auto& [name, value] : env) {
    if (!is_env_name(name)) {
      throw ConfigError{path + "." + name + ": expected an environment variable name ([A-Za-z_][A-Za-z0-9_]*)"};
    }
    if (value.find('\0') != std::string::npos) throw ConfigError{path + "." + name + ": value holds a NUL byte"};
  }
}

RestartPolicy parse_restart(const std::string& text, const std::string& path) {
  if (text == "always") return RestartPolicy::always;
  if (text == "on-failure") return RestartPolicy::on_failure;
  if (text == "never") return RestartPolicy::never;
  fail(path, "\"always\", \"on-failure\" or \"never\"", text);
}

ChildSpec parse_child(const json& value, const std::string& path) {
  static const std::regex kChildName("[a-z0-9][a-z0-9_-]{0,63}");
  ObjectReader reader(value, path);
  ChildSpec child;
  reader.string("name", &child.name);
  if (!std::regex_match(child.name, kChildName)) {
    fail(reader.child_path("name"), "1 to 64 of [a-z0-9_-], starting with a letter or digit", child.name);
  }
  const json* argv = reader.find("argv");
  if (!argv || !argv->is_array() || argv->empty()) {
    fail(reader.child_path("argv"), "a non-empty array of strings", argv ? *argv : json());
  }
  for (size_t i = 0; i < argv->size(); ++i) {
    const json& arg = (*argv)[i];
    std::string arg_path = reader.child_path("argv") + "[" + std::to_string(i) + "]";
    if (!arg.is_string()) fail(arg_path, "a string", arg);
    if (arg.get<std::string>().find('\0') != std::string::npos) fail(arg_path, "a string without NUL bytes", arg);
    child.argv.push_back(arg.get<std::string>());
  }
  if (child.argv[0].empty()) fail(reader.child_path("argv") + "[0]", "a program name or path", (*argv)[0]);
  reader.string_map("env", &child.env);
  check_env_names(child.env, reader.child_path("env"));
  reader.string("cwd", &child.cwd);
  if (!child.cwd.empty() && child.cwd[0] != '/') fail(reader.child_path("cwd"), "an absolute path", child.cwd);
  std::string restart = "on-failure";
  reader.string("restart", &restart);
  child.restart = parse_restart(restart, reader.child_path("restart"));
  reader.milliseconds("backoff_initial_ms", 1, 1, 600'000, &child.backoff_initial);
  reader.milliseconds("backoff_max_ms", 1, 1, 3'600'000, &child.backoff_max);
  if (child.backoff_max < child.backoff_initial) {
    fail(reader.child_path("backoff_max_ms"), "a number no smaller than backoff_initial_ms",
         static_cast<long long>(child.backoff_max.count()));
  }
  reader.integer("max_restarts", 0, 1'000'000, &child.max_restarts);
  reader.milliseconds("restart_window_seconds", 1000, 1, 86'400, &child.restart_window);
  reader.finish();
  return child;
}

void parse_key_list(ObjectReader& reader, std::string_view key, std::vector<std::string>* out) {
  const json* list = reader.find(key);
  if (!list) return;
  std::string path = reader.child_path(key);
  if (!list->is_array()) fail(path, "an array of Z85 public keys", *list);
  for (size_t i = 0; i < list->size(); ++i) {
    const json& item = (*list)[i];
    if (!item.is_string() || !rpc::is_z85_key(item.get<std::string>())) {
      fail(path + "[" + std::to_string(i) + "]", "a 40-character Z85 public key", item);
    }
    out->push_back(item.get<std::string>());
  }
}

void parse_rpc(const json& value, RpcConfig* rpc) {
  ObjectReader reader(value, "rpc");
  if (const json* endpoints = reader.find("endpoints")) {
    if (!endpoints->is_array()) fail("rpc.endpoints", "an array of ipc:// or tcp:// endpoints", *endpoints);
    rpc->endpoints_given = true;
    for (size_t i = 0; i < endpoints->size(); ++i) {
      const json& item = (*endpoints)[i];
      std::string path = "rpc.endpoints[" + std::to_string(i) + "]";
      if (!item.is_string()) fail(path, "a string", item);
      std::string endpoint = item.get<std::string>();
      bool ipc = endpoint.rfind("ipc:///", 0) == 0 && endpoint.size() > 7;
      bool tcp = endpoint.rfind("tcp://", 0) == 0 && endpoint.find(':', 6) != std::string::npos;
      if (!ipc && !tcp) fail(path, "ipc:///ABSOLUTE/PATH or tcp://HOST:PORT", item);
      rpc->endpoints.push_back(endpoint);
    }
  }
  reader.string("secret_key", &rpc->secret_key);
  if (!rpc->secret_key.empty() && !rpc::is_z85_key(rpc->secret_key)) {
    throw ConfigError{"rpc.secret_key: expected a 40-character Z85 secret key"};  // never echo a secret
  }
  reader.string("secret_key_file", &rpc->secret_key_file);
  parse_key_list(reader, "authorized_keys", &rpc->authorized_keys);
  reader.string("authorized_keys_file", &rpc->authorized_keys_file);
  reader.integer("max_in_flight", 1, 1'000'000, &rpc->max_in_flight);
  reader.integer("max_workers", 1, 4096, &rpc->max_workers);
  reader.integer("max_body_bytes", 1024, 64 << 20, &rpc->max_body_bytes);
  reader.integer("max_message_bytes", 1 << 16, 1 << 30, &rpc->max_message_bytes);
  reader.finish();
  bool has_tcp = false;
  for (const auto& endpoint : rpc->endpoints) has_tcp |= endpoint.rfind("tcp://", 0) == 0;
  if (has_tcp && rpc->secret_key.empty() && rpc->secret_key_file.empty()) {
    throw ConfigError{"rpc.secret_key: required with a tcp:// endpoint (or rpc.secret_key_file)"};
  }
  if (has_tcp && rpc->authorized_keys.empty() && rpc->authorized_keys_file.empty()) {
    throw ConfigError{"rpc.authorized_keys: required with a tcp:// endpoint (or rpc.authorized_keys_file)"};
  }
}

void parse_lifecycle(const json& value, LifecycleConfig* lifecycle) {
  ObjectReader reader(value, "lifecycle");
  constexpr int kWeek = 7 * 86'400;
  reader.milliseconds("timeout_seconds", 1000, 0, kWeek, &lifecycle->timeout);
  reader.milliseconds("idle_timeout_seconds", 1000, 0, kWeek, &lifecycle->idle_timeout);
  reader.milliseconds("harvest_margin_seconds", 1000, 0, 3600, &lifecycle->harvest_margin);
  reader.milliseconds("lease_seconds", 1000, 0, kWeek, &lifecycle->lease);
  reader.string("persistent_dir", &lifecycle->persistent_dir);
  if (!lifecycle->persistent_dir.empty() && lifecycle->persistent_dir[0] != '/') {
    fail("lifecycle.persistent_dir", "an absolute path", lifecycle->persistent_dir);
  }
  reader.finish();
}

void parse_jobs(const json& value, JobsConfig* jobs) {
  ObjectReader reader(value, "jobs");
  reader.string("dir", &jobs->dir);
  if (!jobs->dir.empty() && jobs->dir[0] != '/') fail("jobs.dir", "an absolute path", jobs->dir);
  reader.string("staging_dir", &jobs->staging_dir);
  if (!jobs->staging_dir.empty() && jobs->staging_dir[0] != '/') {
    fail("jobs.staging_dir", "an absolute path", jobs->staging_dir);
  }
  reader.integer("max_concurrent", 1, 1024, &jobs->max_concurrent);
  reader.integer("max_queued", 0, 1'000'000, &jobs->max_queued);
  reader.milliseconds("grace_seconds", 1000, 0, 3600, &jobs->grace);
  if (const json* v = reader.find("max_input_bytes")) {
    if (!v->is_number_integer() || v->get<long long>() < 0) {
      fail("jobs.max_input_bytes", "an integer ≥ 0", *v);
    }
    jobs->max_input_bytes = v->get<long long>();
  }
  reader.integer("compression_level", 1, 19, &jobs->compression_level);
  reader.integer("compression_threads", 0, 64, &jobs->compression_threads);
  reader.finish();
}

// A Python identifier that is not a keyword (ASCII only: names user code types).
bool is_python_name(const std::string& name) {
  static const std::set<std::string> kKeywords = {
      "False", "None", "True", "and", "as", "assert", "async", "await", "break", "class", "continue", "def", "del",
      "elif", "else", "except", "finally", "for", "from", "global", "if", "import", "in", "is", "lambda",
      "nonlocal", "not", "or", "pass", "raise", "return", "try", "while", "with", "yield"};
  return is_env_name(name) && !kKeywords.count(name);
}

kernel::PreloadedModel parse_model(const json& value, const std::string& path) {
  ObjectReader reader(value, path);
  kernel::PreloadedModel model;
  auto required = [&](std::string_view key, std::string* out, const char* expected) {
    if (!reader.find(key)) throw ConfigError{reader.child_path(key) + ": required (" + expected + ")"};
    reader.string(key, out);
  };
  required("name", &model.name, "the model's name");
  if (model.name.empty() || model.name.size() > 256 || model.name.find('\0') != std::string::npos) {
    fail(reader.child_path("name"), "1 to 256 characters without NUL", model.name);
  }
  required("path", &model.path, "an absolute path to the model's file or directory");
  if (model.path.empty() || model.path[0] != '/' || model.path.find('\0') != std::string::npos) {
    fail(reader.child_path("path"), "an absolute path", model.path);
  }
  reader.string("var_name", &model.var_name);
  if (!is_python_name(model.var_name) || model.var_name == "model_info") {
    fail(reader.child_path("var_name"), "a Python identifier other than model_info", model.var_name);
  }
  required("loader", &model.loader, "\"transformers\", \"torchscript\" or \"safetensors\"");
  if (model.loader != "transformers" && model.loader != "torchscript" && model.loader != "safetensors") {
    fail(reader.child_path("loader"), "\"transformers\", \"torchscript\" or \"safetensors\"", model.loader);
  }
  reader.string("tokenizer_var", &model.tokenizer_var);
  if (!model.tokenizer_var.empty()) {
    if (model.loader != "transformers") {
      throw ConfigError{reader.child_path("tokenizer_var") + ": only with loader \"transformers\""};
    }
    if (!is_python_name(model.tokenizer_var) || model.tokenizer_var == "model_info" ||
        model.tokenizer_var == model.var_name) {
      fail(reader.child_path("tokenizer_var"), "a Python identifier other than model_info and var_name",
           model.tokenizer_var);
    }
  }
  static const std::regex kDevice("cpu|cuda(:[0-9]{1,3})?");
  reader.string("device", &model.device);
  if (model.device.find(',') != std::string::npos) {
    throw ConfigError{reader.child_path("device") + ": a list of GPUs (\"" + model.device +
                      "\") splits a model only in model_host.models; the kernel loads a model on one device"};
  }
  if (!std::regex_match(model.device, kDevice)) fail(reader.child_path("device"), "\"cpu\", \"cuda\" or \"cuda:N\"", model.device);
  for (const char* key : {"tensor_parallel", "allow_cpu_split"}) {
    if (reader.find(key)) {
      throw ConfigError{reader.child_path(key) + ": only in model_host.models (gpubox-modeld splits a model across "
                        "devices); the kernel loads a model on one device"};
    }
  }
  reader.string("dtype", &model.dtype);
  if (!model.dtype.empty() && model.dtype != "float32" && model.dtype != "float16" && model.dtype != "bfloat16" &&
      model.dtype != "float64") {
    fail(reader.child_path("dtype"), "\"float32\", \"float16\", \"bfloat16\" or \"float64\"", model.dtype);
  }
  reader.boolean("hidden", &model.hidden);
  reader.boolean("is_peft", &model.is_peft);
  reader.string("base_model", &model.base_model);
  if (model.is_peft && model.loader != "transformers") {
    throw ConfigError{reader.child_path("is_peft") + ": only with loader \"transformers\""};
  }
  if (model.is_peft && model.base_model.empty()) {
    throw ConfigError{reader.child_path("base_model") + ": required with is_peft: true (the base the adapter at path applies to)"};
  }
  if (!model.base_model.empty() && !model.is_peft) {
    throw ConfigError{reader.child_path("base_model") + ": only with is_peft: true"};
  }
  if (model.base_model.find('\0') != std::string::npos) fail(reader.child_path("base_model"), "a path or model id without NUL", model.base_model);
  reader.finish();
  return model;
}

void parse_models(const json& value, std::vector<kernel::PreloadedModel>* models) {
  if (!value.is_array()) fail("kernel.models", "an array of model objects", value);
  std::set<std::string> names, variables;
  for (size_t i = 0; i < value.size(); ++i) {
    std::string path = "kernel.models[" + std::to_string(i) + "]";
    kernel::PreloadedModel model = parse_model(value[i], path);
    if (!names.insert(model.name).second) fail(path + ".name", "a name no other model has", model.name);
    if (!variables.insert(model.var_name).second) fail(path + ".var_name", "a variable no other model binds", model.var_name);
    if (!model.tokenizer_var.empty() && !variables.insert(model.tokenizer_var).second) {
      fail(path + ".tokenizer_var", "a variable no other model binds", model.tokenizer_var);
    }
    models->push_back(std::move(model));
  }
}

void parse_seccomp(const json& value, SeccompSettings* seccomp) {
  ObjectReader reader(value, "seccomp");
  std::string profile = "default";
  reader.string("profile", &profile);
  if (profile != "default" && profile != "unconfined") fail("seccomp.profile", "\"default\" or \"unconfined\"", profile);
  seccomp->enabled = profile == "default";
  reader.boolean("allow_namespaces", &seccomp->allow_namespaces);
  reader.finish();
}

void parse_kernel(const json& value, KernelConfig* kernel) {
  ObjectReader reader(value, "kernel");
  reader.boolean("enabled", &kernel->enabled);
  reader.string("python", &kernel->python);
  if (kernel->python.empty()) fail("kernel.python", "a program name or path", kernel->python);
  reader.string("mode", &kernel->mode);
  if (kernel->mode != "" && kernel->mode != "ipython" && kernel->mode != "plain") {
    fail("kernel.mode", "\"ipython\" or \"plain\"", kernel->mode);
  }
  if (kernel->mode == "ipython") kernel->mode.clear();
  if (const json* setup = reader.find("setup_code")) {
    if (!setup->is_array()) fail("kernel.setup_code", "an array of strings (Python code)", *setup);
    for (size_t i = 0; i < setup->size(); ++i) {
      if (!(*setup)[i].is_string()) fail("kernel.setup_code[" + std::to_string(i) + "]", "a string", (*setup)[i]);
      kernel->setup_code.push_back((*setup)[i].get<std::string>());
    }
  }
  reader.string("workspace_dir", &kernel->workspace_dir);
  if (!kernel->workspace_dir.empty() &&
      (kernel->workspace_dir[0] != '/' || kernel->workspace_dir.find('\0') != std::string::npos)) {
    fail("kernel.workspace_dir", "an absolute path", kernel->workspace_dir);
  }
  if (const json* models = reader.find("models")) parse_models(*models, &kernel->models);
  reader.boolean("preload", &kernel->preload);
  reader.milliseconds("execute_timeout_seconds", 1000, 0, 30 * 86'400, &kernel->execute_timeout);
  reader.string("connection_file", &kernel->connection_file);
  if (!kernel->connection_file.empty() && kernel->connection_file[0] != '/') {
    fail("kernel.connection_file", "an absolute path", kernel->connection_file);
  }
  reader.finish();
}

// A hosted model's device ("cpu", "cuda", "cuda:N" or a list "cuda:N,M,...": the
// model split across those GPUs), tensor_parallel and allow_cpu_split, refused
// as modeld's rank_devices refuses them (model/modeld/config/host_config.h).
void parse_split(ObjectReader& reader, HostedModel* model) {
  // At most 64 GPUs of up to 3 digits; the length is checked first (std::regex recurses per character).
  static const std::regex kDevice("cpu|cuda(:[0-9]{1,3}(,[0-9]{1,3}){0,63})?");
  const std::string device_path = reader.child_path("device"), ranks_path = reader.child_path("tensor_parallel");
  if (model->device.size() > 300 || !std::regex_match(model->device, kDevice)) {
    fail(device_path, "\"cpu\", \"cuda\", \"cuda:N\" or a list of up to 64 GPUs \"cuda:N,M,...\"", model->device);
  }
  std::vector<int> listed;  // the GPUs of "cuda:N" or "cuda:N,M,..."
  if (model->device.rfind("cuda:", 0) == 0) {
    std::stringstream items(model->device.substr(5));
    for (std::string item; std::getline(items, item, ',');) listed.push_back(std::stoi(item));
  }
  std::set<int> seen;
  for (int gpu : listed) {
    if (!seen.insert(gpu).second) fail(device_path, "each GPU listed once (cuda:" + std::to_string(gpu) + " is twice)", model->device);
  }
  if (reader.find("tensor_parallel")) {
    int ranks = 1;
    reader.integer("tensor_parallel", 1, 64, &ranks);
    model->tensor_parallel = ranks;
  }
  reader.boolean("allow_cpu_split", &model->allow_cpu_split);
  if (listed.size() > 1 && model->tensor_parallel && *model->tensor_parallel != static_cast<int>(listed.size())) {
    throw ConfigError{ranks_path + ": " + std::to_string(*model->tensor_parallel) + " does not match device \"" + model->device +
                      "\", which lists " + std::to_string(listed.size()) + " GPUs"};
  }
  if (model->device == "cpu" && model->tensor_parallel.value_or(1) > 1 && !model->allow_cpu_split) {
    throw ConfigError{ranks_path + ": " + std::to_string(*model->tensor_parallel) +
                      " ranks on device \"cpu\" is a CPU split, for tests and small machines: it needs allow_cpu_split: true"};
  }
}

// Same conventions as kernel.models: unknown keys refused, names unique, paths absolute.
HostedModel parse_hosted_model(const json& value, const std::string& path) {
  ObjectReader reader(value, path);
  HostedModel model;
  if (!reader.find("name")) throw ConfigError{reader.child_path("name") + ": required (the model's name)"};
  reader.string("name", &model.name);
  if (model.name.empty() || model.name.size() > 256 || model.name.find('\0') != std::string::npos) {
    fail(reader.child_path("name"), "1 to 256 characters without NUL", model.name);
  }
  if (!reader.find("path")) throw ConfigError{reader.child_path("path") + ": required (an absolute path to the model's directory)"};
  reader.string("path", &model.path);
  if (model.path.empty() || model.path[0] != '/' || model.path.find('\0') != std::string::npos) {
    fail(reader.child_path("path"), "an absolute path", model.path);
  }
  reader.string("device", &model.device);
  parse_split(reader, &model);
  // Default: bfloat16 on a GPU (half the memory, the usual serving dtype), float32 on the CPU.
  model.dtype = model.device == "cpu" ? "float32" : "bfloat16";
  reader.string("dtype", &model.dtype);
  if (model.dtype != "float32" && model.dtype != "bfloat16" && model.dtype != "float16") {
    fail(reader.child_path("dtype"), "\"float32\", \"bfloat16\" or \"float16\"", model.dtype);
  }
  reader.boolean("hidden", &model.hidden);
  reader.boolean("cuda_graphs", &model.cuda_graphs);
  reader.integer("max_batch", 1, 4096, &model.max_batch);
  reader.integer("max_queue", 0, 100'000, &model.max_queue);
  if (reader.find("kv_cache_mb")) {
    int megabytes = 0;
    reader.integer("kv_cache_mb", 1, 1'048'576, &megabytes);
    model.kv_cache_mb = megabytes;
  }
  if (const json* saes = reader.find("saes")) {
    std::string saes_path = reader.child_path("saes");
    if (!saes->is_array()) fail(saes_path, "an array of {name, path, hook?} objects", *saes);
    std::set<std::string> names;
    for (size_t i = 0; i < saes->size(); ++i) {
      std::string at = saes_path + "[" + std::to_string(i) + "]";
      ObjectReader sae((*saes)[i], at);
      std::string name, sae_path, hook;
      sae.string("name", &name);
      sae.string("path", &sae_path);
      sae.string("hook", &hook);
      sae.finish();
      if (name.empty() || name.find('\0') != std::string::npos) fail(at + ".name", "a non-empty name", name);
      if (!names.insert(name).second) fail(at + ".name", "a name no other SAE of this model has", name);
      if (sae_path.empty() || sae_path[0] != '/' || sae_path.find('\0') != std::string::npos) {
        fail(at + ".path", "an absolute path (a directory with cfg.json and sae_weights.safetensors)", sae_path);
      }
      json entry = {{"name", name}, {"path", sae_path}};
      if (!hook.empty()) entry["hook"] = hook;
      model.saes.push_back(std::move(entry));
    }
  }
  reader.finish();
  return model;
}

void parse_model_host(const json& value, ModelHostConfig* host) {
  ObjectReader reader(value, "model_host");
  host->enabled = true;
  reader.string("binary", &host->binary);
  if (!host->binary.empty() && (host->binary[0] != '/' || host->binary.find('\0') != std::string::npos)) {
    fail("model_host.binary", "an absolute path", host->binary);
  }
  if (const json* models = reader.find("models")) {
    if (!models->is_array()) fail("model_host.models", "an array of model objects", *models);
    std::set<std::string> names;
    for (size_t i = 0; i < models->size(); ++i) {
      std::string path = "model_host.models[" + std::to_string(i) + "]";
      HostedModel model = parse_hosted_model((*models)[i], path);
      if (!names.insert(model.name).second) fail(path + ".name", "a name no other model has", model.name);
      host->models.push_back(std::move(model));
    }
  }
  reader.finish();
}

Config parse_document(const json& document) {
  Config config;
  ObjectReader root(document, "");
  root.string("state_dir", &config.state_dir);
  if (config.state_dir.empty() || config.state_dir[0] != '/') fail("state_dir", "an absolute path", config.state_dir);

  if (const json* log_value = root.find("log")) {
    ObjectReader log_reader(*log_value, "log");
    std::string level = "info";
    log_reader.string("level", &level);
    if (!log::parse_level(level, &config.log_level)) {
      fail("log.level", "one of \"trace\", \"debug\", \"info\", \"warn\", \"error\", \"off\"", level);
    }
    log_reader.boolean("stderr", &config.log_stderr);
    log_reader.boolean("file", &config.log_file);
    log_reader.finish();
  }

  if (const json* shutdown = root.find("shutdown")) {
    ObjectReader shutdown_reader(*shutdown, "shutdown");
    shutdown_reader.milliseconds("grace_seconds", 1000, 0, 3600, &config.shutdown_grace);
    shutdown_reader.finish();
  }

  if (const json* lifecycle = root.find("lifecycle")) parse_lifecycle(*lifecycle, &config.lifecycle);
  if (const json* jobs = root.find("jobs")) parse_jobs(*jobs, &config.jobs);
  if (const json* kernel = root.find("kernel")) parse_kernel(*kernel, &config.kernel);
  if (const json* seccomp = root.find("seccomp")) parse_seccomp(*seccomp, &config.seccomp);
  if (const json* model_host = root.find("model_host")) parse_model_host(*model_host, &config.model_host);

  root.string_map("env", &config.env);
  check_env_names(config.env, "env");
  root.string_map("secrets", &config.secrets);
  check_env_names(config.secrets, "secrets");

  if (const json* children = root.find("children")) {
    if (!children->is_array()) fail("children", "an array of child objects", *children);
    std::set<std::string> names;
    for (size_t i = 0; i < children->size(); ++i) {
      std::string path = "children[" + std::to_string(i) + "]";
      ChildSpec child = parse_child((*children)[i], path);
      if (!names.insert(child.name).second) fail(path + ".name", "a name no other child has", child.name);
      config.children.push_back(std::move(child));
    }
  }
  if (const json* rpc = root.find("rpc")) parse_rpc(*rpc, &config.rpc);
  if (!config.rpc.endpoints_given) config.rpc.endpoints = {"ipc://" + config.state_dir + "/rpc.sock"};
  root.finish();
  return config;
}

bool looks_like_base64(std::string_view text) {
  if (text.empty()) return false;
  for (char c : text) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '+' || c == '/' || c == '=' || c == '\n' || c == '\r')) {
      return false;
    }
  }
  return true;
}

}  // namespace

std::string_view restart_policy_name(RestartPolicy policy) {
  switch (policy) {
    case RestartPolicy::always: return "always";
    case RestartPolicy::on_failure: return "on-failure";
    case RestartPolicy::never: return "never";
  }
  return "never";
}

Result<Config> parse_config(std::string_view json_text) {
  json document;
  try {
    document = json::parse(json_text);
  } catch (const json::parse_error& e) {
    return Status(ErrorCode::invalid_request,
                  "config: not valid JSON at byte " + std::to_string(e.byte) + " (" + e.what() + ")");
  }
  try {
    return parse_document(document);
  } catch (const ConfigError& e) {
    return Status(ErrorCode::invalid_request, e.message);
  }
}

Result<std::string> decode_config_env(std::string_view value) {
  size_t first = value.find_first_not_of(" \t\r\n");
  if (first != std::string_view::npos && value[first] == '{') return std::string(value);
  if (looks_like_base64(value)) {
    if (auto decoded = base64_decode(value)) return *decoded;
  }
  return Status(ErrorCode::invalid_request, "GPUBOX_CONFIG: expected a JSON object or its base64 encoding");
}

std::string config_to_json(const Config& config) {
  auto seconds = [](std::chrono::milliseconds ms) { return static_cast<double>(ms.count()) / 1000.0; };
  json document;
  document["state_dir"] = config.state_dir;
  constexpr const char* kLevels[] = {"trace", "debug", "info", "warn", "error", "off"};
  document["log"] = {{"level", kLevels[static_cast<int>(config.log_level)]},
                     {"stderr", config.log_stderr},
                     {"file", config.log_file}};
  document["shutdown"] = {{"grace_seconds", seconds(config.shutdown_grace)}};
  document["env"] = config.env;
  document["secrets"] = json::object();
  for (const auto& [name, value] : config.secrets) document["secrets"][name] = "[redacted]";
  document["children"] = json::array();
  for (const auto& child : config.children) {
    json c = {{"name", child.name},
              {"argv", child.argv},
              {"env", child.env},
              {"restart", restart_policy_name(child.restart)},
              {"backoff_initial_ms", child.backoff_initial.count()},
              {"backoff_max_ms", child.backoff_max.count()},
              {"max_restarts", child.max_restarts},
              {"restart_window_seconds", seconds(child.restart_window)}};
    if (!child.cwd.empty()) c["cwd"] = child.cwd;
    document["children"].push_back(std::move(c));
  }
  json rpc = {{"endpoints", config.rpc.endpoints},
              {"authorized_keys", config.rpc.authorized_keys},
              {"max_in_flight", config.rpc.max_in_flight},
              {"max_workers", config.rpc.max_workers},
              {"max_body_bytes", config.rpc.max_body_bytes},
              {"max_message_bytes", config.rpc.max_message_bytes}};
  if (!config.rpc.secret_key.empty()) rpc["secret_key"] = "[redacted]";
  if (!config.rpc.secret_key_file.empty()) rpc["secret_key_file"] = config.rpc.secret_key_file;
  if (!config.rpc.authorized_keys_file.empty()) rpc["authorized_keys_file"] = config.rpc.authorized_keys_file;
  document["rpc"] = std::move(rpc);
  document["lifecycle"] = {{"timeout_seconds", seconds(config.lifecycle.timeout)},
                           {"idle_timeout_seconds", seconds(config.lifecycle.idle_timeout)},
                           {"harvest_margin_seconds", seconds(config.lifecycle.harvest_margin)},
                           {"lease_seconds", seconds(config.lifecycle.lease)},
                           {"persistent_dir", config.lifecycle.persistent_dir}};
  document["jobs"] = {{"dir", config.jobs.dir},
                      {"staging_dir", config.jobs.staging_dir},
                      {"max_concurrent", config.jobs.max_concurrent},
                      {"max_queued", config.jobs.max_queued},
                      {"grace_seconds", seconds(config.jobs.grace)},
                      {"max_input_bytes", config.jobs.max_input_bytes},
                      {"compression_level", config.jobs.compression_level},
                      {"compression_threads", config.jobs.compression_threads}};
  document["seccomp"] = {{"profile", config.seccomp.enabled ? "default" : "unconfined"},
                         {"allow_namespaces", config.seccomp.allow_namespaces}};
  document["kernel"] = {{"enabled", config.kernel.enabled},
                        {"python", config.kernel.python},
                        {"mode", config.kernel.mode.empty() ? "ipython" : config.kernel.mode},
                        {"setup_code", config.kernel.setup_code},
                        {"preload", config.kernel.preload},
                        {"execute_timeout_seconds", seconds(config.kernel.execute_timeout)},
                        {"connection_file", config.kernel.connection_file},
                        {"workspace_dir", config.kernel.workspace_dir},
                        {"models", json::array()}};
  for (const auto& model : config.kernel.models) {
    json m = {{"name", model.name},     {"path", model.path},     {"var_name", model.var_name},
              {"loader", model.loader}, {"device", model.device}, {"hidden", model.hidden}};
    if (!model.tokenizer_var.empty()) m["tokenizer_var"] = model.tokenizer_var;
    if (!model.dtype.empty()) m["dtype"] = model.dtype;
    if (model.is_peft) m["is_peft"] = true, m["base_model"] = model.base_model;
    document["kernel"]["models"].push_back(std::move(m));
  }
  if (config.model_host.enabled) {
    json host = {{"models", json::array()}};
    if (!config.model_host.binary.empty()) host["binary"] = config.model_host.binary;
    for (const auto& model : config.model_host.models) host["models"].push_back(hosted_model_entry(model, model.path));
    document["model_host"] = std::move(host);
  }
  return document.dump(2);
}

json hosted_model_entry(const HostedModel& model, const std::string& path) {
  json entry = {{"name", model.name},     {"path", path},     {"dtype", model.dtype},
                {"device", model.device}, {"hidden", model.hidden}, {"cuda_graphs", model.cuda_graphs},
                {"max_batch", model.max_batch}, {"max_queue", model.max_queue}};
  if (model.tensor_parallel) entry["tensor_parallel"] = *model.tensor_parallel;
  if (model.allow_cpu_split) entry["allow_cpu_split"] = true;
  if (model.kv_cache_mb) entry["kv_cache_mb"] = *model.kv_cache_mb;
  if (!model.saes.empty()) entry["saes"] = model.saes;
  return entry;
}

}  // namespace gpubox
