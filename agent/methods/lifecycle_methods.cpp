// sys.heartbeat (rpc/PROTOCOL.md, "System"): renews the owner lease. Runs on a worker thread.
#include "agent/lifecycle/watchdogs.h"
#include "agent/methods/methods.h"
#include "rpc/params.h"

namespace gpubox {

void add_lifecycle_methods(rpc::MethodRegistry& methods, Watchdogs& watchdogs) {
  methods.add("sys.heartbeat", [&watchdogs](rpc::CallContext& call) -> Result<nlohmann::json> {
    rpc::ParamReader params(call.params());
    if (Status status = params.finish(); !status) return status;
    return watchdogs.heartbeat();
  });
}

}  // namespace gpubox
