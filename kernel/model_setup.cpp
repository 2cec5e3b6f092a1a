#include "kernel/model_setup.h"

#include "base/embedded_python.h"

namespace gpubox::kernel {
namespace {

using nlohmann::json;

// A Python string literal holding text: a JSON string literal is one.
std::string py_string(const std::string& text) { return json(text).dump(-1, ' ', false, json::error_handler_t::replace); }

// What the loader gets for one model; a hidden model's name and configured paths are left out.
json loader_entry(const ModelLoad& load) {
  const PreloadedModel& spec = load.spec;
  json entry = {{"var_name", spec.var_name}, {"tokenizer_var", spec.tokenizer_var}, {"loader", spec.loader},
                {"device", spec.device},     {"dtype", spec.dtype},                 {"hidden", spec.hidden},
                {"is_peft", spec.is_peft},   {"path", load.load_path},              {"base_model", load.load_base_model}};
  if (!spec.hidden) entry["name"] = spec.name;
  if (!load.error.empty()) entry["error"] = load.error;
  return entry;
}

}  // namespace

std::string workspace_setup_code(const std::string& dir) {
  return "import os as _gpubox_os, sys as _gpubox_sys\n"
         "_gpubox_os.makedirs(" + py_string(dir) + ", exist_ok=True)\n"
         "if " + py_string(dir) + " not in _gpubox_sys.path:\n"
         "    _gpubox_sys.path.insert(0, " + py_string(dir) + ")\n"
         "del _gpubox_os, _gpubox_sys\n";
}

std::string python_package_setup_code() { return embedded_package_code("gpubox", "<gpubox>", python_package_sources()); }

std::string models_setup_code(const std::vector<ModelLoad>& loads) {
  json entries = json::array();
  for (const auto& load : loads) entries.push_back(loader_entry(load));
  return "import json as _gpubox_json, types as _gpubox_types\n"
         "_gpubox_loader = _gpubox_types.ModuleType('gpubox_model_loader')\n"
         "exec(compile(" + py_string(kModelLoaderSource) + ", '<gpubox-model-loader>', 'exec'), _gpubox_loader.__dict__)\n"
         "globals().update(_gpubox_loader.load_models(_gpubox_json.loads(" + py_string(entries.dump()) + "), display, " +
         py_string(kModelReportMime) + "))\n"
         "del _gpubox_json, _gpubox_types, _gpubox_loader\n";
}

json pending_model_report(const std::vector<ModelLoad>& loads) {
  json report = json::array();
  for (const auto& load : loads) {
    const PreloadedModel& spec = load.spec;
    json entry = {{"var_name", spec.var_name}, {"loader", spec.loader}, {"hidden", spec.hidden}, {"device", spec.device}};
    if (!spec.tokenizer_var.empty()) entry["tokenizer_var"] = spec.tokenizer_var;
    if (!spec.hidden) {
      entry["name"] = spec.name;
      entry["path"] = spec.path;
    }
    entry["status"] = load.error.empty() ? "pending" : "failed";
    if (!load.error.empty()) entry["error"] = load.error;
    report.push_back(std::move(entry));
  }
  return report;
}

}  // namespace gpubox::kernel
