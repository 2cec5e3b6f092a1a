// `gpubox model ID ls | info | stats | hooks | tokenize | generate | run | load | unload`: the
// sandbox's model host (pull: host/cli/model_pull.cpp) (rpc/PROTOCOL.md, "Models") through host/model_client.h.
// Every subcommand waits for a model host that is starting; info, tokenize and
// generate also for a model that is still loading, with a progress bar on stderr.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <iostream>
#include <sstream>
#include <thread>

#include "base/terminal_text.h"
#include "host/cli/cli.h"
#include "host/cli/progress.h"
#include "host/model_client.h"
#include "model/weights/safetensors_writer.h"

namespace gpubox::host::cli {
namespace {

using nlohmann::json;

constexpr char kModelUsage[] =
    "usage: gpubox model ID ls\n"
    "       gpubox model ID info NAME\n"
    "       gpubox model ID stats NAME\n"
    "       gpubox model ID hooks NAME\n"
    "       gpubox model ID tokenize NAME TEXT\n"
    "       gpubox model ID generate NAME PROMPT|--ids I,J,... [--max-new-tokens N] [--temperature T] [--top-k K]\n"
    "                                [--top-p P] [--seed S] [--stop STR]... [--ignore-eos] [--stream]\n"
    "                                [--chat [--system TEXT]]\n"
    "       gpubox model ID run NAME PROMPT|--ids I,J,... [--capture HOOK]... [--sae-capture SAE[:K]]...\n"
    "                           [--out FILE.safetensors]\n"
    "       gpubox model ID sae load NAME SAE PATH [--hook HOOK]\n"
    "       gpubox model ID sae ls NAME\n"
    "       gpubox model ID sae unload NAME SAE\n"
    "       gpubox model ID load NAME PATH [--dtype D] [--device D] [--tensor-parallel N] [--allow-cpu-split]\n"
    "                                  [--hidden] [--wait]\n"
    "       gpubox model ID unload NAME\n"
    "       gpubox model ID pull REPO --volume NAME|--to DIR [--subdir DIR] [--revision REV] [--endpoint URL]\n"
    "                              [--timeout S] [--budget NAME|none] [--egress-gib G]   (also: gpubox model pull ID REPO ...)\n"
    "  ID is a sandbox (id, prefix or name) or an ipc:// endpoint of an agent. info and generate wait for a\n"
    "  model that is loading (a progress bar on stderr). generate prints the text (the token ids for a model\n"
    "  without a tokenizer); --stream prints it as the tokens arrive. hooks lists the hook points (ops and\n"
    "  captures name them, as TransformerLens does) with their shapes. run captures hook points, prints each\n"
    "  tensor's name, dtype and shape, and with --out writes the captures to a safetensors file (the logits\n"
    "  too with --capture logits). --sae-capture SAE captures a loaded SAE's feature activations at its hook\n"
    "  (sae:SAE), SAE:K the top K per position (sae:SAE:indices, sae:SAE:values). sae load loads an SAE in\n"
    "  SAELens' format (a directory in the sandbox with cfg.json and sae_weights.safetensors) for model NAME\n"
    "  at its cfg.json's hook (or --hook); sae ls lists a model's SAEs.\n"
    "  load --device cuda:0,1 or --tensor-parallel N splits the model across GPUs (one rank each; N from\n"
    "  cuda:K on, or cuda:0 on with --device cuda); on the CPU a split needs --allow-cpu-split (docs/models.md).\n"
    "  --chat sends PROMPT as the user's message (after --system's), rendered\n"
    "  with the model's chat template (docs/chat_templates.md). --json: the methods' results as JSON.\n"
    "  pull runs a job in the sandbox that downloads the Hugging Face repository REPO (the image's\n"
    "  huggingface_hub) into the volume's VOLUME_PATH/REPO (or --subdir; --to DIR instead of a volume), unless\n"
    "  config.json or adapter_config.json is there already; HF_TOKEN from this environment is the job's secret.\n"
    "  It shows progress on stderr and prints the path (--json: repo, commit, path, files, bytes, skipped).\n"
    "  Under a budget, pull reserves --egress-gib G at the egress price and, with --timeout, the part of it\n"
    "  that outlives what the sandbox holds, before the job is sent (docs/budget.md).\n";

const std::string kModelCommand = "model";

int usage_error(const std::string& message) { return fail_usage(kModelCommand, message); }

// An agent's or modeld's refusal: an unknown model or a bad parameter is a usage error.
int call_error(const Status& status) {
  int code = status.code() == ErrorCode::not_found || status.code() == ErrorCode::invalid_request ? kExitUsage : kExitFailed;
  return fail(kModelCommand, status.to_string(), code);
}

void print_json(const json& value) {
  std::cout << value.dump(2, ' ', false, json::error_handler_t::replace) << std::endl;
}

std::string string_or_dump(const json& value) { return value.is_string() ? value.get<std::string>() : value.dump(); }

// A value of modeld's answer (names, architectures, errors, paths: what the sandbox's files and code
// made them) as the terminal shows it: nothing in it acts on the terminal.
std::string model_text(const json& value) { return escape_for_terminal(string_or_dump(value)); }

// Waits until NAME is ready: a bar of bytes loaded on a terminal, one plain line otherwise.
Status wait_ready(ModelClient& models, const std::string& name) {
  std::unique_ptr<Progress> bar;
  bool said = false;
  auto ready = models.wait_ready(name, [&](const json& entry) {
    auto total = entry.value("bytes_total", std::uint64_t{0});
    auto done = entry.value("bytes_loaded", std::uint64_t{0});
    if (!said) {
      said = true;
      bar = std::make_unique<Progress>(total, "loading " + name, 0);
      if (!::isatty(STDERR_FILENO)) std::fprintf(stderr, "gpubox model: waiting for model '%s' to load\n", escape_for_terminal(name).c_str());
    }
    bar->set(done, total);
  });
  if (ready && bar) bar->set(1, 1);
  return ready ? Status::ok() : ready.status();
}

std::optional<std::vector<std::int64_t>> parse_ids(const std::string& text) {
  std::vector<std::int64_t> ids;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    auto id = parse_number(item, 0, 1e12);
    if (!id || *id != static_cast<double>(static_cast<std::int64_t>(*id))) return std::nullopt;
    ids.push_back(static_cast<std::int64_t>(*id));
  }
  if (ids.empty()) return std::nullopt;
  return ids;
}

// A list of devices as one word: "cuda:0,cuda:1".
std::string joined_devices(const json& devices) {
  std::string joined;
  for (const auto& device : devices) joined += (joined.empty() ? "" : ",") + string_or_dump(device);
  return joined;
}

// model ls's DEVICE: the "devices" of a model split across several, else its "device".
json shown_device(const json& model) {
  const json devices = model.value("devices", json::array());
  if (devices.is_array() && devices.size() > 1) return joined_devices(devices);
  return model.value("device", json("-"));
}

int run_list(ModelClient& models, bool as_json) {
  auto listed = models.list();
  if (!listed) return call_error(listed.status());
  if (as_json) return print_json(*listed), kExitOk;
  std::printf("%-24s %-8s %-14s %-10s %-8s %s\n", "NAME", "STATE", "ARCHITECTURE", "DTYPE", "DEVICE", "LOADED");
  for (const auto& m : *listed) {
    double total = static_cast<double>(m.value("bytes_total", 0ULL)), done = static_cast<double>(m.value("bytes_loaded", 0ULL));
    std::printf("%-24s %-8s %-14s %-10s %-8s %.1f/%.1f MiB%s\n", model_text(m.value("name", json("?"))).c_str(),
                model_text(m.value("state", json("?"))).c_str(), model_text(m.value("architecture", json("-"))).c_str(),
                model_text(m.value("dtype", json("-"))).c_str(), model_text(shown_device(m)).c_str(), done / 1048576.0,
                total / 1048576.0, m.contains("error") ? ("  " + model_text(m["error"])).c_str() : "");
  }
  return kExitOk;
}

int run_model_info(ModelClient& models, const std::string& name, bool as_json) {
  if (Status s = wait_ready(models, name); !s) return call_error(s);
  auto info = models.info(name);
  if (!info) return call_error(info.status());
  if (as_json) return print_json(*info), kExitOk;
  for (const auto& [key, value] : info->items()) {
    std::string text = model_text(value);
    if (key == "hook_points") text += "   (gpubox model ID hooks " + escape_for_terminal(name) + " lists them)";
    if (key == "devices" && value.is_array()) text = model_text(joined_devices(value));
    if (key == "kv_cache") {
      char line[128];
      std::snprintf(line, sizeof line, "%lld tokens (%.1f MiB, %llu bytes a token)", value.value("tokens", 0LL),
                    static_cast<double>(value.value("bytes", 0ULL)) / 1048576.0, value.value("bytes_per_token", 0ULL));
      text = line;
    }
    std::printf("%-20s %s\n", (escape_for_terminal(key) + ":").c_str(), text.c_str());
  }
  return kExitOk;
}

// The model's batch (queue, requests, rows, tokens/s), its KV cache pool and its attention kernels.
int run_stats(ModelClient& models, const std::string& name, bool as_json) {
  if (Status s = wait_ready(models, name); !s) return call_error(s);
  auto stats = models.stats(name);
  if (!stats) return call_error(stats.status());
  if (as_json) return print_json(*stats), kExitOk;
  const json batch = stats->value("batching", json::object());
  const json kv = batch.value("kv", json::object());
  auto number = [](const json& object, const char* key) { return object.value(key, 0LL); };
  std::printf("queue:       %lld waiting (max_queue %lld)\n", number(batch, "queue_depth"), number(batch, "max_queue"));
  std::printf("batch:       %lld requests, %lld rows (max_batch %lld; peak %lld rows in one step)\n",
              number(batch, "running"), number(batch, "batch_rows"), number(batch, "max_batch"),
              number(batch, "peak_batch_rows"));
  std::printf("throughput:  %.1f tokens/s over the last 10 s (%lld requests done)\n",
              batch.value("tokens_per_second", 0.0), number(batch, "requests_done"));
  std::printf("kv cache:    %lld of %lld blocks used (%lld positions each; %.1f MiB)\n", number(kv, "blocks_used"),
              number(kv, "blocks"), number(kv, "block_tokens"), static_cast<double>(number(kv, "bytes")) / 1048576.0);
  const json attention = stats->value("attention", json::object());
  std::printf("attention:   prefill %s, decode %s, fixed decode %s\n", model_text(attention.value("prefill", json("-"))).c_str(),
              model_text(attention.value("decode", json("-"))).c_str(), model_text(attention.value("fixed_decode", json("-"))).c_str());
  const json graphs = batch.value("graphs", json::object());
  std::printf("cuda graphs: %lld captured, %lld reused\n", number(graphs, "captured"), number(graphs, "reused"));
  for (const auto& device : stats->value("kv_budget", json::object()).value("devices", json::array())) {
    auto mib = [&](const char* key) { return static_cast<double>(device.value(key, 0ULL)) / 1048576.0; };
    std::printf("%-12s %.0f MiB: weights %.0f, kv caches %.0f, free %.0f, kept for activations %.0f, other processes %.0f\n",
                (model_text(device.value("device", json("?"))) + ":").c_str(), mib("total_bytes"), mib("weights_bytes"),
                mib("pools_bytes"), mib("free_bytes"), mib("margin_bytes"), mib("others_bytes"));
  }
  return kExitOk;
}

// One line a hook point: its name and its shape, symbolic dims as words ("[batch, pos, 64]").
int run_hooks(ModelClient& models, const std::string& name, bool as_json) {
  if (Status s = wait_ready(models, name); !s) return call_error(s);
  auto hooks = models.hooks(name);
  if (!hooks) return call_error(hooks.status());
  if (as_json) return print_json(*hooks), kExitOk;
  for (const auto& hook : *hooks) {
    std::string shape;
    for (const auto& dim : hook["shape"]) shape += (shape.empty() ? "" : ", ") + model_text(dim);
    std::printf("%-36s [%s]\n", model_text(hook.value("name", json("?"))).c_str(), shape.c_str());
  }
  std::printf("%zu hook points\n", hooks->size());
  return kExitOk;
}

int run_tokenize(ModelClient& models, const std::string& name, const std::string& text, bool as_json) {
  if (Status s = wait_ready(models, name); !s) return call_error(s);
  auto tokens = models.tokenize(name, text);
  if (!tokens) return call_error(tokens.status());
  if (as_json) return print_json(*tokens), kExitOk;
  std::string line;
  for (const auto& id : (*tokens)["ids"]) line += (line.empty() ? "" : " ") + id.dump();
  std::printf("%s\n", line.c_str());
  return kExitOk;
}

// generate's flags into modeld's params; a usage error message when one is bad.
std::optional<std::string> generate_params(const Args& args, json& params) {
  struct Numeric {
    const char* flag;
    const char* key;
    double min, max;
    bool integer;
  };
  const Numeric numeric[] = {{"--max-new-tokens", "max_new_tokens", 0, 1 << 20, true}, {"--temperature", "temperature", 0, 100, false},
                             {"--top-k", "top_k", 0, 1 << 30, true},                    {"--top-p", "top_p", 0, 1, false},
                             {"--seed", "seed", 0, 9e15, true}};
  for (const auto& n : numeric) {
    auto text = args.last(n.flag);
    if (!text) continue;
    auto value = parse_number(*text, n.min, n.max);
    if (!value || (n.integer && *value != static_cast<double>(static_cast<std::int64_t>(*value)))) {
      auto bound = [](double v) { return v == std::floor(v) ? std::to_string(static_cast<long long>(v)) : json(v).dump(); };
      return std::string(n.flag) + " '" + *text + "': expected " + (n.integer ? "an integer" : "a number") + " from " +
             bound(n.min) + " to " + bound(n.max);
    }
    if (n.integer) params[n.key] = static_cast<std::int64_t>(*value);
    else params[n.key] = *value;
  }
  if (!args.all("--stop").empty()) params["stop"] = args.all("--stop");
  if (args.flag("--ignore-eos")) params["ignore_eos"] = true;
  return std::nullopt;
}

// The prompt of generate or run (PROMPT, or --ids) into params; a usage error message when it is bad.
std::optional<std::string> prompt_params(const Args& args, const std::string& sub, json& params) {
  if (auto ids = args.last("--ids")) {
    if (args.positional.size() != 3) return sub + ": give PROMPT or --ids, not both";
    auto parsed = parse_ids(*ids);
    if (!parsed) return "--ids '" + *ids + "': expected token ids separated by commas";
    params["ids"] = *parsed;
  } else {
    if (args.positional.size() != 4) return sub + ": expected NAME PROMPT (or NAME --ids I,J,...)";
    params["text"] = args.positional[3];
  }
  auto system = args.last("--system");
  if (system && !args.flag("--chat")) return "--system needs --chat";
  if (args.flag("--chat")) {
    if (params.contains("ids")) return "--chat needs PROMPT, not --ids";
    json messages = json::array();
    if (system) messages.push_back({{"role", "system"}, {"content", *system}});
    messages.push_back({{"role", "user"}, {"content", params["text"]}});
    params.erase("text");
    params["messages"] = messages;
  }
  return std::nullopt;
}

std::optional<weights::DType> safetensors_dtype(const std::string& wire) {
  if (wire == "float32") return weights::DType::F32;
  if (wire == "bfloat16") return weights::DType::BF16;
  if (wire == "float16") return weights::DType::F16;
  if (wire == "int64") return weights::DType::I64;
  return std::nullopt;
}

// run: model.run with a capture per --capture; the captures written to --out as safetensors.
int run_captures(ModelClient& models, const Args& args, bool as_json) {
  const std::string& name = args.positional[2];
  json params = json::object();
  if (auto bad = prompt_params(args, "run", params)) return usage_error(*bad);
  const auto& hooks = args.all("--capture");
  const auto& sae_captures = args.all("--sae-capture");
  if (hooks.empty() && sae_captures.empty()) {
    return usage_error("run: give --capture HOOK or --sae-capture SAE (one or more; `gpubox model ID hooks " + name + "` lists the hooks)");
  }
  params["ops"] = json::array();
  for (const auto& spec : sae_captures) {
    json op = {{"op", "sae_capture"}, {"sae", spec.substr(0, spec.find(':'))}};
    if (std::size_t colon = spec.find(':'); colon != std::string::npos) {
      const std::string k = spec.substr(colon + 1);
      if (k.empty() || k.size() > 9 || k.find_first_not_of("0123456789") != std::string::npos || std::stoll(k) < 1) {
        return usage_error("--sae-capture " + spec + ": expected SAE or SAE:K (K a positive number of features)");
      }
      op["top_k"] = std::stoll(k);
    }
    params["ops"].push_back(std::move(op));
  }
  // The logits always come back: --capture logits asks for them in the file, not for a second copy.
  bool logits_asked = false;
  for (std::size_t i = 0; i < hooks.size(); ++i) {
    if (std::find(hooks.begin(), hooks.begin() + static_cast<long>(i), hooks[i]) != hooks.begin() + static_cast<long>(i)) {
      return usage_error("--capture " + hooks[i] + " is given twice");
    }
    if (hooks[i] == "logits") {
      logits_asked = true;
    } else {
      params["ops"].push_back({{"op", "capture"}, {"hook", hooks[i]}});
    }
  }
  if (Status s = wait_ready(models, name); !s) return call_error(s);
  auto result = models.run(name, params);
  if (!result) return call_error(result.status());
  json listed = json::array();
  std::vector<weights::TensorToWrite> captures;
  for (const auto& t : result->tensors) {
    listed.push_back({{"name", t.name}, {"dtype", t.dtype}, {"shape", t.shape}});
    if (t.name == "logits" && !logits_asked) continue;
    auto dtype = safetensors_dtype(t.dtype);
    if (!dtype) return fail(kModelCommand, "capture " + t.name + " has dtype " + t.dtype + ", which safetensors cannot hold here", kExitFailed);
    captures.push_back({t.name, *dtype, t.shape, t.bytes(), t.size()});
  }
  auto out = args.last("--out");
  if (out) {
    std::map<std::string, std::string> metadata = {{"model", name}, {"lengths", result->result.value("lengths", json()).dump()},
                                                   {"padding", result->result.value("padding", "left")}};
    if (Status s = weights::write_safetensors(*out, captures, metadata); !s) return fail(kModelCommand, s, kExitFailed);
  }
  if (as_json) {
    json shown = {{"tensors", listed}, {"lengths", result->result.value("lengths", json())}};
    if (out) shown["out"] = *out;
    return print_json(shown), kExitOk;
  }
  for (const auto& t : listed) std::printf("%s %s %s\n", model_text(t["name"]).c_str(), model_text(t["dtype"]).c_str(), model_text(t["shape"]).c_str());
  if (out) std::fprintf(stderr, "wrote %zu captures to %s\n", captures.size(), escape_for_terminal(*out).c_str());
  return kExitOk;
}

int run_generate(ModelClient& models, const Args& args, bool as_json) {
  const std::string& name = args.positional[2];
  json params = json::object();
  if (auto bad = prompt_params(args, "generate", params)) return usage_error(*bad);
  if (auto bad = generate_params(args, params)) return usage_error(*bad);
  if (Status s = wait_ready(models, name); !s) return call_error(s);
  bool stream = args.flag("--stream");
  bool printed = false;
  auto on_step = [&](const GenerateStep& step) {
    if (as_json) {
      std::cout << json{{"step", step.step}, {"tokens", step.tokens}, {"text", step.text}}.dump(-1, ' ', false, json::error_handler_t::replace)
                << std::endl;
    } else if (!step.text.empty()) {
      std::cout << step.text[0] << std::flush;
    } else if (!step.tokens.empty() && step.tokens[0] >= 0) {
      std::cout << (printed ? " " : "") << step.tokens[0] << std::flush;
    }
    printed = true;
    return true;
  };
  auto result = models.generate(name, params, stream ? std::function<bool(const GenerateStep&)>(on_step) : nullptr);
  if (!result) {
    if (printed && !as_json) std::cout << std::endl;
    return call_error(result.status());
  }
  if (as_json) return print_json(*result), kExitOk;
  if (stream) {
    std::cout << std::endl;
  } else if (result->contains("text")) {
    std::cout << string_or_dump((*result)["text"]) << std::endl;
  } else {
    std::string line;
    for (const auto& id : (*result)["tokens"]) line += (line.empty() ? "" : " ") + id.dump();
    std::cout << line << std::endl;
  }
  std::fprintf(stderr, "finish_reason: %s\n", model_text(result->value("finish_reason", json("?"))).c_str());
  if (const auto cut = result->find("max_new_tokens_cut"); cut != result->end()) {
    std::fprintf(stderr, "max_new_tokens %s cut to %s: the prompt and the new tokens fill the model's context of %s tokens\n",
                 model_text((*cut)["asked"]).c_str(), model_text((*cut)["allowed"]).c_str(), model_text((*cut)["context_length"]).c_str());
  }
  return kExitOk;
}

// PATH (of model load, sae load) is the sandbox's: a host path it does not see says so.
Status with_mount_hint(const Status& status) {
  const std::string& text = status.message();
  if (text.find("cannot open '") == std::string::npos && text.find(": cannot be read") == std::string::npos) return status;
  return Status(status.code(), status.message() + " (PATH is a path in the sandbox; a host path it does not see "
                                                  "must be mounted: gpubox create --mount HOST:SANDBOX[:ro])");
}

// sae load|ls|unload: a model's SAEs (model.sae_load, model.saes, model.sae_unload).
int run_sae(ModelClient& models, const Args& args, bool as_json) {
  const auto& p = args.positional;
  const std::string& action = p[2];
  const std::string& name = p[3];
  Result<json> answer = Status(ErrorCode::internal, "");
  if (action == "load") {
    if (p.size() != 6) return usage_error("sae load: expected NAME SAE PATH");
    json spec = {{"name", p[4]}, {"path", p[5]}};
    if (auto hook = args.last("--hook")) spec["hook"] = *hook;
    if (Status s = wait_ready(models, name); !s) return call_error(s);
    answer = models.sae_load(name, spec);
  } else if (action == "ls") {
    if (p.size() != 4) return usage_error("sae ls: expected NAME");
    if (Status s = wait_ready(models, name); !s) return call_error(s);
    answer = models.saes(name);
  } else if (action == "unload") {
    if (p.size() != 5) return usage_error("sae unload: expected NAME SAE");
    answer = models.sae_unload(name, p[4]);
  } else {
    return usage_error("sae: unknown action '" + action + "' (load, ls, unload)");
  }
  if (!answer) return call_error(action == "load" ? with_mount_hint(answer.status()) : answer.status());
  if (as_json) return print_json(*answer), kExitOk;
  if (action == "load") {
    std::printf("%s: %s SAE at %s, %lld features\n", escape_for_terminal(p[4]).c_str(), model_text(answer->value("architecture", json("?"))).c_str(),
                model_text(answer->value("hook", json("?"))).c_str(), static_cast<long long>(answer->value("d_sae", 0)));
  } else if (action == "ls") {
    for (const auto& sae : answer->value("saes", json::array())) {
      std::printf("%s %s %s d_in=%lld d_sae=%lld\n", model_text(sae.value("name", json("?"))).c_str(), model_text(sae.value("hook", json("?"))).c_str(),
                  model_text(sae.value("architecture", json("?"))).c_str(), static_cast<long long>(sae.value("d_in", 0)),
                  static_cast<long long>(sae.value("d_sae", 0)));
    }
  } else {
    std::printf("%s: unloaded\n", escape_for_terminal(p[4]).c_str());
  }
  return kExitOk;
}

int run_load(ModelClient& models, const Args& args, bool as_json) {
  if (args.positional.size() != 4) return usage_error("load: expected NAME PATH");
  json spec = {{"name", args.positional[2]}, {"path", args.positional[3]}};
  if (auto dtype = args.last("--dtype")) spec["dtype"] = *dtype;
  if (auto device = args.last("--device")) spec["device"] = *device;
  if (auto ranks = args.last("--tensor-parallel")) {
    auto number = parse_number(*ranks, 1, 64);
    if (!number || *number != static_cast<double>(static_cast<int>(*number))) {
      return usage_error("--tensor-parallel '" + *ranks + "': expected an integer from 1 to 64 (the ranks the model is split into)");
    }
    spec["tensor_parallel"] = static_cast<int>(*number);
  }
  if (args.flag("--allow-cpu-split")) spec["allow_cpu_split"] = true;
  if (args.flag("--hidden")) spec["hidden"] = true;
  auto loaded = models.load(spec);
  if (!loaded) return call_error(with_mount_hint(loaded.status()));
  if (args.flag("--wait")) {
    if (Status s = wait_ready(models, args.positional[2]); !s) return call_error(with_mount_hint(s));
    (*loaded)["state"] = "ready";
  }
  if (as_json) return print_json(*loaded), kExitOk;
  std::printf("%s: %s\n", escape_for_terminal(args.positional[2]).c_str(), model_text(loaded->value("state", json("?"))).c_str());
  return kExitOk;
}

}  // namespace

int run_model(const std::vector<std::string>& raw, const Global& global) {
  auto args = parse_args(raw,
                         {"--max-new-tokens", "--temperature", "--top-k", "--top-p", "--seed", "--stop", "--ids", "--dtype", "--device",
                          "--tensor-parallel", "--capture", "--out", "--system", "--volume", "--to", "--subdir", "--revision", "--endpoint",
                          "--timeout", "--budget", "--egress-gib", "--sae-capture", "--hook"},
                         {"--stream", "--ignore-eos", "--hidden", "--wait", "--chat", "--allow-cpu-split"});
  if (!args) return fail_usage(kModelCommand, args.status());
  if (args->flag("--help")) return show_usage(kModelUsage);
  // The spelling `model pull ID REPO` is `model ID pull REPO`.
  if (args->positional.size() >= 2 && args->positional[0] == "pull" && args->positional[1] != "pull") {
    std::swap(args->positional[0], args->positional[1]);
  }
  const auto& p = args->positional;
  if (p.size() < 2) return usage_error("expected ID and a subcommand (ls, info, stats, hooks, tokenize, generate, run, load, unload, sae, pull)");
  const std::string& sub = p[1];
  struct Shape {
    const char* name;
    size_t min, max;
    const char* expects;
  };
  const Shape shapes[] = {{"ls", 2, 2, ""},           {"info", 3, 3, " NAME"},          {"stats", 3, 3, " NAME"},
                          {"hooks", 3, 3, " NAME"},
                          {"tokenize", 4, 4, " NAME TEXT"},
                          {"generate", 3, 4, " NAME PROMPT"}, {"run", 3, 4, " NAME PROMPT --capture HOOK"},
                          {"load", 4, 4, " NAME PATH"},       {"unload", 3, 3, " NAME"},
                          {"pull", 3, 3, " REPO --volume NAME"},  {"sae", 4, 6, " load|ls|unload NAME [SAE [PATH]]"}};
  const Shape* shape = nullptr;
  for (const auto& s : shapes) {
    if (sub == s.name) shape = &s;
  }
  if (!shape) return usage_error("unknown subcommand '" + sub + "' (ls, info, stats, hooks, tokenize, generate, run, load, unload, sae, pull)");
  if (p.size() < shape->min || p.size() > shape->max) return usage_error(sub + ": expected ID " + sub + shape->expects);
  if (sub == "pull") return run_model_pull(*args, global);  // a job of the agent's: no model host needed

  std::unique_ptr<rpc::Client> client;
  if (p[0].rfind("ipc://", 0) == 0) {
    rpc::ClientOptions options;
    options.endpoint = p[0];
    options.connect_timeout = std::chrono::milliseconds(5'000);
    auto connected = rpc::Client::connect(options);
    if (!connected) return fail(kModelCommand, connected.status(), kExitUnreachable);
    client = std::move(*connected);
  } else {
    auto record = find_sandbox(p[0]);
    if (!record) return fail(kModelCommand, record.status(), exit_code_for(record.status()));
    auto connected = connect_sandbox(*record);
    if (!connected) return fail(kModelCommand, connected.status(), kExitUnreachable);
    client = std::move(*connected);
  }
  ModelClient models(*client);
  // Right after `gpubox create` (or a crash of modeld) the host is still starting: wait for it.
  for (bool said = false; models.host_starting(); said = true) {
    if (!said) std::fprintf(stderr, "gpubox model: waiting for the model host to start\n");
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  bool as_json = global.json || args->flag("--json");
  if (sub == "ls") return run_list(models, as_json);
  if (sub == "info") return run_model_info(models, p[2], as_json);
  if (sub == "stats") return run_stats(models, p[2], as_json);
  if (sub == "hooks") return run_hooks(models, p[2], as_json);
  if (sub == "tokenize") return run_tokenize(models, p[2], p[3], as_json);
  if (sub == "generate") return run_generate(models, *args, as_json);
  if (sub == "run") return run_captures(models, *args, as_json);
  if (sub == "load") return run_load(models, *args, as_json);
  if (sub == "sae") return run_sae(models, *args, as_json);
  auto unloaded = models.unload(p[2]);
  if (!unloaded) return call_error(unloaded.status());
  if (as_json) return print_json(*unloaded), kExitOk;
  std::printf("%s: unloaded\n", escape_for_terminal(p[2]).c_str());
  // A call still running holds its memory (model.unload's "released": false): say so, not that it is free.
  if (!unloaded->value("released", true)) std::printf("%s\n", escape_for_terminal(unloaded->value("message", "")).c_str());
  return kExitOk;
}

}  // namespace gpubox::host::cli
