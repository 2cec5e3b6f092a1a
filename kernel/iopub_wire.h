// The wire form of an iopub message, as xeus 2.4.1's serialize_iopub makes it
// (topic, delimiter, HMAC signature, header, parent header, metadata, content,
// buffers), its JSON written by append_json (kernel/json_writer.h) and its
// parts handed to ZeroMQ without a copy.
#pragma once

#include <nlohmann/json.hpp>

#include "xeus/xauthentication.hpp"
#include "xeus/xmessage.hpp"
#include "zmq_addon.hpp"

namespace gpubox::kernel {

// Signed with auth; the message's JSON is consumed as is (handler: invalid UTF-8).
zmq::multipart_t serialize_iopub(xeus::xpub_message&& message, const xeus::xauthentication& auth,
                                 nlohmann::json::error_handler_t handler);

}  // namespace gpubox::kernel
