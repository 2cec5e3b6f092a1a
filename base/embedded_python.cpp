#include "base/embedded_python.h"

#include <nlohmann/json.hpp>

namespace gpubox {
namespace {

using nlohmann::json;

// A Python string literal holding text: a JSON string literal is one.
std::string py_string(const std::string& text) { return json(text).dump(-1, ' ', false, json::error_handler_t::replace); }

constexpr char kFinder[] =
    "class _GpuboxEmbeddedFinder:\n"
    "    def __init__(self, package, origin, table):\n"
    "        self.package, self.origin, self.table = package, origin, table\n"
    "    def _module(self, name):\n"
    "        if name == self.package:\n"
    "            return '__init__'\n"
    "        prefix = self.package + '.'\n"
    "        return name[len(prefix):] if name.startswith(prefix) and name[len(prefix):] in self.table else None\n"
    "    def _file(self, name):\n"
    "        return '%s/%s.py' % (self.origin, self._module(name))\n"
    "    def find_spec(self, name, path=None, target=None):\n"
    "        if self._module(name) is None:\n"
    "            return None\n"
    "        import importlib.util\n"
    "        return importlib.util.spec_from_loader(name, self, origin=self._file(name), is_package=name == self.package)\n"
    "    def create_module(self, spec):\n"
    "        return None\n"
    "    def get_source(self, name):\n"
    "        return self.table[self._module(name)]\n"
    "    def exec_module(self, module):\n"
    "        module.__file__ = self._file(module.__name__)\n"
    "        exec(compile(self.get_source(module.__name__), module.__file__, 'exec'), module.__dict__)\n";

}  // namespace

std::string embedded_package_code(const std::string& package, const std::string& origin,
                                  const EmbeddedSources& sources) {
  json table = json::object();
  for (const auto& [module, source] : sources) table[module] = source;
  return std::string("import sys as _gpubox_sys, json as _gpubox_json\n") + kFinder +
         "_gpubox_sys.meta_path.insert(0, _GpuboxEmbeddedFinder(" + py_string(package) + ", " + py_string(origin) +
         ", _gpubox_json.loads(" + py_string(table.dump(-1, ' ', false, json::error_handler_t::replace)) + ")))\n"
         "del _gpubox_sys, _gpubox_json, _GpuboxEmbeddedFinder\n";
}

std::string embedded_package_program(const std::string& package, const std::string& origin,
                                     const EmbeddedSources& sources) {
  return embedded_package_code(package, origin, sources) + "from " + package + ".__main__ import main\nmain()\n";
}

}  // namespace gpubox
