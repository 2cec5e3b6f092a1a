#include "rpc/method_registry.h"

namespace gpubox::rpc {

void MethodRegistry::add(std::string name, Handler handler, Dispatch dispatch) {
  methods_[std::move(name)] = Method{std::move(handler), dispatch, nullptr};
}

void MethodRegistry::add(std::string name, Handler handler, FastPath fast) {
  methods_[std::move(name)] = Method{std::move(handler), Dispatch::worker, std::move(fast)};
}

void MethodRegistry::add_prefix(std::string prefix, Handler handler) {
  prefixes_[std::move(prefix)] = Method{std::move(handler), Dispatch::worker, nullptr};
}

const MethodRegistry::Method* MethodRegistry::find(const std::string& name) const {
  if (auto it = methods_.find(name); it != methods_.end()) return &it->second;
  const Method* best = nullptr;
  std::size_t best_length = 0;
  for (const auto& [prefix, method] : prefixes_) {
    if (prefix.size() >= best_length && name.size() > prefix.size() && name.compare(0, prefix.size(), prefix) == 0) {
      best = &method;
      best_length = prefix.size();
    }
  }
  return best;
}

std::vector<std::string> MethodRegistry::names() const {
  std::vector<std::string> names;
  for (const auto& [name, method] : methods_) names.push_back(name);
  for (const auto& [prefix, method] : prefixes_) names.push_back(prefix + "*");
  return names;
}

}  // namespace gpubox::rpc
