#include "model/modeld/gpu/beside_executable.h"

#include <dlfcn.h>
#include <fmt/format.h>
#include <limits.h>
#include <unistd.h>

namespace gpubox::modeld {

void* load_beside_executable(std::string_view name, const char* symbol, std::string& error) {
  char self[PATH_MAX] = {};
  ssize_t length = ::readlink("/proc/self/exe", self, sizeof self - 1);
  if (length <= 0) {
    error = "cannot locate this executable (/proc/self/exe)";
    return nullptr;
  }
  std::string path(self, static_cast<std::size_t>(length));
  path = path.substr(0, path.rfind('/') + 1);
  path += name;
  void* library = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!library) {
    const char* why = ::dlerror();
    error = fmt::format("cannot load {}: {}", path, why ? why : "unknown error");
    return nullptr;
  }
  void* function = ::dlsym(library, symbol);
  if (!function) error = fmt::format("{} has no {}", path, symbol);
  return function;
}

}  // namespace gpubox::modeld
