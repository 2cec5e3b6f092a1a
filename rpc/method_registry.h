// MethodRegistry: method names (and name prefixes) to the handlers the
// Server runs for them. Filled on one thread before the server starts;
// read-only, so any thread may read it, after.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/status.h"
#include "rpc/call.h"

namespace gpubox::rpc {

using Handler = std::function<Result<nlohmann::json>(CallContext&)>;
// Tried on the I/O thread before a worker-dispatched handler, and must never
// block: true when it took the call, which it (or whoever it hands the shared
// context to) then ends with CallContext::answer() from any thread; false to
// have the handler run on a worker as usual. A taken call that stops first
// (cancel, deadline, disconnect, shutdown) runs its CallContext::on_stop callback.
using FastPath = std::function<bool(const std::shared_ptr<CallContext>&)>;

// Method names → handlers, plus prefix routes (every method under "model."
// goes to one forwarder). Filled before the server starts; read-only after.
class MethodRegistry {
 public:
  // io_thread: for quick methods that never block and never stream (sys.ping).
  enum class Dispatch { worker, io_thread };
  struct Method {
    Handler handler;
    Dispatch dispatch = Dispatch::worker;
    FastPath fast;  // worker dispatch only; may be empty
  };
  void add(std::string name, Handler handler, Dispatch dispatch = Dispatch::worker);
  // A worker-dispatched method whose calls first try fast (serve.call's small plain calls).
  void add(std::string name, Handler handler, FastPath fast);
  // Serves every method whose name starts with prefix (e.g. "model.") and
  // has no handler of its own; the longest matching prefix wins. Worker dispatch.
  void add_prefix(std::string prefix, Handler handler);
  // The exact name's handler, else the longest matching prefix's, else null.
  const Method* find(const std::string& name) const;
  // Exact names, then each prefix as "PREFIX*".
  std::vector<std::string> names() const;

 private:
  std::map<std::string, Method, std::less<>> methods_;
  std::map<std::string, Method, std::less<>> prefixes_;
};

}  // namespace gpubox::rpc
