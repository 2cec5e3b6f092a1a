#include "kernel/iopub_wire.h"

#include <memory>

#include "kernel/json_writer.h"

namespace gpubox::kernel {
namespace {

using nlohmann::json;

// A zero-copy ZeroMQ frame that owns text.
zmq::message_t frame_of(std::string&& text) {
  auto* owned = new std::string(std::move(text));
  return zmq::message_t(owned->data(), owned->size(), [](void*, void* hint) { delete static_cast<std::string*>(hint); },
                        owned);
}

xeus::xraw_buffer raw(const std::string& text) {
  return xeus::xraw_buffer(reinterpret_cast<const unsigned char*>(text.data()), text.size());
}

}  // namespace

zmq::multipart_t serialize_iopub(xeus::xpub_message&& message, const xeus::xauthentication& auth,
                                 json::error_handler_t handler) {
  std::string header, parent, metadata, content;
  append_json(header, message.header(), handler);
  append_json(parent, message.parent_header(), handler);
  append_json(metadata, message.metadata(), handler);
  content.reserve(64);
  append_json(content, message.content(), handler);
  std::string signature = auth.sign(raw(header), raw(parent), raw(metadata), raw(content));
  zmq::multipart_t wire;
  wire.addstr(message.topic());
  wire.addstr("<IDS|MSG>");
  wire.addstr(signature);
  wire.add(frame_of(std::move(header)));
  wire.add(frame_of(std::move(parent)));
  wire.add(frame_of(std::move(metadata)));
  wire.add(frame_of(std::move(content)));
  for (const auto& buffer : message.buffers()) wire.addmem(buffer.data(), buffer.size());
  return wire;
}

}  // namespace gpubox::kernel
