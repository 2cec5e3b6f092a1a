#include "kernel/model_setup.h"

namespace gpubox::kernel {
namespace {

using nlohmann::json;

// A Python string literal holding text: a JSON string literal is one.
std::string py_string(const std::string& text) { return json(text).dump(-1, ' ', false, json::error_handler_t::replace); }

// What the loader gets for one model; a hidden model's name and configured paths are left out.
json loader_entry(const ModelLoad& load) {
  const ModelSpec& spec = load.spec;
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

std::string python_package_setup_code() {
  json sources = json::object();
  for (const auto& [module, source] : python_package_sources()) sources[module] = source;
  return "import sys as _gpubox_sys\n"
         "class _GpuboxPackageFinder:\n"
         "    sources = " + py_string(sources.dump()) + "\n"
         "    def _module(self, name):\n"
         "        if name == 'gpubox':\n"
         "            return '__init__'\n"
         "        return name[7:] if name.startswith('gpubox.') and name[7:] in self.table else None\n"
         "    def find_spec(self, name, path=None, target=None):\n"
         "        if self._module(name) is None:\n"
         "            return None\n"
         "        import importlib.util\n"
         "        return importlib.util.spec_from_loader(name, self, origin='<gpubox>/%s.py' % self._module(name),\n"
         "                                               is_package=name == 'gpubox')\n"
         "    def create_module(self, spec):\n"
         "        return None\n"
         "    def get_source(self, name):\n"
         "        return self.table[self._module(name)]\n"
         "    def exec_module(self, module):\n"
         "        module.__file__ = '<gpubox>/%s.py' % self._module(module.__name__)\n"
         "        exec(compile(self.get_source(module.__name__), module.__file__, 'exec'), module.__dict__)\n"
         "_gpubox_finder = _GpuboxPackageFinder()\n"
         "import json as _gpubox_json\n"
         "_gpubox_finder.table = _gpubox_json.loads(_gpubox_finder.sources)\n"
         "_gpubox_sys.meta_path.insert(0, _gpubox_finder)\n"
         "del _gpubox_sys, _GpuboxPackageFinder, _gpubox_finder, _gpubox_json\n";
}

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
    const ModelSpec& spec = load.spec;
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
