// InputUpload: receives job.submit's input files into a job's incoming dir
// and checks each against its declared size and sha256 (rpc/PROTOCOL.md,
// "Jobs"). Used by the job.submit handler on its worker thread.
#pragma once

#include <string>
#include <vector>

#include "agent/jobs/job_spec.h"
#include "rpc/call.h"

namespace gpubox::jobs {

// Writes every input into dir/NAME, from the CALL's attachments (one per
// input, in order) or, without attachments, from the DATA stream that
// follows. A mismatch is input_changed naming the input; the caller then
// removes dir, so nothing of a refused submission stays.
Status receive_inputs(rpc::CallContext& call, const std::vector<InputFile>& inputs, const std::string& dir);

}  // namespace gpubox::jobs
