#include "agent/methods/upload_stream.h"

namespace gpubox {

Status receive_upload_stream(rpc::CallContext& call, const UploadStream& stream,
                             const std::function<Result<bool>(rpc::Incoming&)>& on_data) {
  call.grant_credit(stream.window);
  std::uint64_t consumed = 0;
  auto last_data = std::chrono::steady_clock::now();
  while (true) {
    auto next = call.receive_data(std::chrono::seconds(1));
    if (!next) return next.status();
    if (!next->has_value()) {
      if (std::chrono::steady_clock::now() - last_data > stream.idle_limit) {
        return Status(ErrorCode::deadline_exceeded,
                      "no DATA for " + std::to_string(stream.idle_limit.count()) + " s; " + stream.abandoned);
      }
      continue;
    }
    last_data = std::chrono::steady_clock::now();
    auto ended = on_data(**next);
    if (!ended) return ended.status();
    if (*ended) return Status::ok();
    // Grant the window again each time half of it has been consumed.
    if (++consumed >= stream.window / 2) {
      call.grant_credit(consumed);
      consumed = 0;
    }
  }
}

}  // namespace gpubox
