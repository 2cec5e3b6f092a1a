// The receiving side of a client's streamed upload (fs.write, job.submit
// inputs): DATA messages taken one by one, credit granted a window at a time,
// and an abandoned upload ended after an idle limit.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "rpc/call.h"

namespace gpubox {

struct UploadStream {
  std::uint64_t window = 8;                     // DATA the uploader may send ahead
  std::chrono::seconds idle_limit{300};         // no DATA for this long: deadline_exceeded
  std::string abandoned = "the upload was abandoned";  // ends that error's message
};

// Calls on_data for each DATA until it returns true (the upload's end) or an
// error, which is returned as it is.
Status receive_upload_stream(rpc::CallContext& call, const UploadStream& stream,
                             const std::function<Result<bool>(rpc::Incoming&)>& on_data);

}  // namespace gpubox
